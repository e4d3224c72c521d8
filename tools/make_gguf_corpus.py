#!/usr/bin/env python3
"""Writes tests/data/gguf_bad/: small malformed GGUF files, each breaking one
rule of the format (docs/numerics.md, GGUF container), and EXPECTED.txt, which lists for each file
a substring that the reader's error message must contain.

Usage: tools/make_gguf_corpus.py [output folder]   (stdlib only)
"""
import os
import struct
import sys

# Value type ids (docs/numerics.md, GGUF container).
UINT8, INT8, UINT16, INT16, UINT32, INT32, FLOAT32, BOOL, STRING, ARRAY, UINT64, INT64, FLOAT64 = range(13)
F32, F16, Q8_0 = 0, 1, 8


def u32(v):
    return struct.pack('<I', v & 0xFFFFFFFF)


def i32(v):
    return struct.pack('<i', v)


def u64(v):
    return struct.pack('<Q', v & 0xFFFFFFFFFFFFFFFF)


def i64(v):
    return struct.pack('<q', v)


def gstr(s):
    b = s.encode() if isinstance(s, str) else s
    return u64(len(b)) + b


def kv(key, vtype, payload):
    """One key/value pair; payload is the already encoded value."""
    return gstr(key) + i32(vtype) + payload


def kv_u32(key, v):
    return kv(key, UINT32, u32(v))


def tinfo(name, ne, ttype=F32, offset=0):
    """One tensor info."""
    return gstr(name) + u32(len(ne)) + b''.join(i64(x) for x in ne) + i32(ttype) + u64(offset)


def header(n_tensors, n_kv, version=3):
    return b'GGUF' + u32(version) + u64(n_tensors) + u64(n_kv)


def pad(b, align=32):
    return b + b'\0' * (-len(b) % align)


def gguf(kvs=(), tensors=(), data=b'', version=3, align=32):
    """A complete file: kvs and tensors are encoded pieces; data follows the padding."""
    head = header(len(tensors), len(kvs), version) + b''.join(kvs) + b''.join(tensors)
    return pad(head, align) + data


NAME = kv('general.architecture', STRING, gstr('qwen3vl'))
ONE_F32 = tinfo('t', [8])  # 32 bytes of F32 data at offset 0


def cases():
    """(file name, bytes, expected message substring)"""
    good = gguf([NAME], [ONE_F32], b'\0' * 32)
    yield 'empty.gguf', b'', 'too small'
    yield 'magic_only.gguf', b'GGU', 'too small'
    yield 'bad_magic.gguf', b'GGML' + good[4:], 'bad magic'
    yield 'truncated_version.gguf', b'GGUF\x03\x00', 'truncated'
    yield 'version0.gguf', header(0, 0, version=0), 'unsupported version 0'
    yield 'version1.gguf', header(0, 0, version=1), 'unsupported version 1'
    yield 'version4.gguf', header(0, 0, version=4), 'unsupported version 4'
    yield 'big_endian.gguf', b'GGUF' + struct.pack('>I', 3) + struct.pack('>Q', 0) * 2, 'wrong endianness'
    yield 'truncated_counts.gguf', header(0, 0)[:20], 'truncated'
    yield 'negative_tensors.gguf', b'GGUF' + u32(3) + i64(-1) + u64(0), 'tensor count -1 is negative'
    yield 'negative_kv.gguf', b'GGUF' + u32(3) + u64(0) + i64(-5), 'key/value count -5 is negative'
    yield 'absurd_kv_count.gguf', header(0, 1 << 40) + NAME, 'cannot fit'
    yield 'absurd_tensor_count.gguf', header(1 << 33, 1) + NAME, 'cannot fit'
    yield 'counts_too_large.gguf', header(3, 3) + NAME, 'cannot fit'
    yield 'kv_truncated.gguf', (header(0, 2) + NAME + kv_u32('a.b', 1))[:-2], 'truncated'
    yield 'key_length_huge.gguf', header(0, 2) + u64(1 << 62) + b'x' * 40, 'past the end of the file'
    yield 'key_empty.gguf', header(0, 2) + kv('', UINT32, u32(1)) + NAME, 'empty key'
    yield 'key_nul.gguf', header(0, 2) + kv('a\0b', UINT32, u32(1)) + NAME, 'NUL byte'
    yield 'key_duplicate.gguf', header(0, 3) + NAME + kv_u32('x.y', 1) + kv_u32('x.y', 2), "duplicate key 'x.y'"
    yield 'value_type_unknown.gguf', header(0, 2) + kv('a.b', 13, u32(0)) + NAME, 'unknown value type 13'
    yield 'value_type_negative.gguf', header(0, 2) + kv('a.b', -1, u32(0)) + NAME, 'unknown value type -1'
    yield 'value_truncated.gguf', header(0, 1) + kv('a.b', UINT64, u32(0)) + b'\0\0', 'truncated'
    yield 'string_value_huge.gguf', header(0, 2) + kv('a.b', STRING, u64(1000)) + b'x' * 30, 'past the end of the file'
    yield 'bool_value_2.gguf', header(0, 2) + kv('a.b', BOOL, b'\x02') + NAME, 'BOOL value 2'
    yield 'array_nested.gguf', header(0, 2) + kv('a.b', ARRAY, i32(ARRAY) + u64(1) + i32(UINT8) + u64(0)) + NAME, 'nested array'
    yield 'array_elem_type_unknown.gguf', header(0, 2) + kv('a.b', ARRAY, i32(42) + u64(1) + b'\0' * 8) + NAME, 'unknown element type 42'
    yield 'array_count_huge.gguf', header(0, 2) + kv('a.b', ARRAY, i32(UINT32) + u64(1000) + b'\0' * 16) + NAME, 'past the end of the file'
    # count * 8 wraps around 2^64 to a small number: must still be refused.
    yield 'array_count_overflow.gguf', header(0, 2) + kv('a.b', ARRAY, i32(UINT64) + u64((1 << 61) + 1) + b'\0' * 16) + NAME, 'past the end of the file'
    yield 'array_strings_count_huge.gguf', header(0, 2) + kv('a.b', ARRAY, i32(STRING) + u64(1 << 40) + gstr('x') * 4) + NAME, 'past the end of the file'
    yield 'array_string_truncated.gguf', header(0, 2) + kv('a.b', ARRAY, i32(STRING) + u64(3) + gstr('ab') + u64(500) + b'c' * 20) + NAME, 'past the end of the file'
    yield 'array_bool_2.gguf', header(0, 2) + kv('a.b', ARRAY, i32(BOOL) + u64(3) + b'\x00\x01\x07') + NAME, 'BOOL value 7'
    yield 'alignment_type.gguf', gguf([NAME, kv('general.alignment', UINT64, u64(32))]), 'general.alignment has type UINT64'
    yield 'alignment_zero.gguf', gguf([NAME, kv_u32('general.alignment', 0)]), 'nonzero power of two'
    yield 'alignment_not_pow2.gguf', gguf([NAME, kv_u32('general.alignment', 48)]), 'nonzero power of two'
    yield 'tensor_info_truncated.gguf', (header(1, 1) + NAME + ONE_F32)[:-3], 'truncated'
    yield 'tensor_name_empty.gguf', gguf([NAME], [tinfo('', [8])], b'\0' * 32), 'empty name'
    yield 'tensor_name_64.gguf', gguf([NAME], [tinfo('n' * 64, [8])], b'\0' * 32), '64 bytes long'
    yield 'tensor_name_nul.gguf', gguf([NAME], [tinfo('a\0b', [8])], b'\0' * 32), 'NUL byte'
    yield 'tensor_name_huge.gguf', header(1, 1) + NAME + u64(1 << 50) + b'x' * 40, 'past the end of the file'
    yield 'tensor_duplicate.gguf', gguf([NAME], [tinfo('t', [8]), tinfo('t', [8], offset=32)], b'\0' * 64), "duplicate tensor name 't'"
    yield 'tensor_5_dims.gguf', gguf([NAME], [tinfo('t', [8, 1, 1, 1, 1])], b'\0' * 32), '5 dimensions'
    yield 'tensor_negative_dim.gguf', gguf([NAME], [tinfo('t', [8, -2])], b'\0' * 32), 'negative dimension 1'
    yield 'tensor_elems_overflow.gguf', gguf([NAME], [tinfo('t', [1 << 32, 1 << 32])], b'\0' * 32), 'count overflows'
    yield 'tensor_bytes_overflow.gguf', gguf([NAME], [tinfo('t', [1 << 62])], b'\0' * 32), 'byte size overflows'
    yield 'tensor_type_unknown.gguf', gguf([NAME], [tinfo('t', [8], ttype=99)], b'\0' * 32), 'type 99 (unknown)'
    yield 'tensor_type_negative.gguf', gguf([NAME], [tinfo('t', [8], ttype=-3)], b'\0' * 32), 'type -3 (unknown)'
    yield 'tensor_type_removed.gguf', gguf([NAME], [tinfo('t', [32], ttype=4)], b'\0' * 32), 'does not support'
    yield 'tensor_block_multiple.gguf', gguf([NAME], [tinfo('t', [33, 2], ttype=Q8_0)], b'\0' * 96), 'multiple of'
    yield 'tensor_offset_first.gguf', gguf([NAME], [tinfo('t', [8], offset=32)], b'\0' * 64), 'has offset 32, expected 0'
    # The second tensor must start at pad(12, 32) = 32, not right after the first.
    yield 'tensor_offset_unpadded.gguf', gguf([NAME], [tinfo('a', [3]), tinfo('b', [8], offset=12)], b'\0' * 64), 'has offset 12, expected 32'
    yield 'tensor_offset_overlap.gguf', gguf([NAME], [tinfo('a', [8]), tinfo('b', [8], offset=0)], b'\0' * 64), 'has offset 0, expected 32'
    yield 'tensor_data_outside.gguf', gguf([NAME], [tinfo('t', [16, 4])], b'\0' * 100), 'lies outside the file'
    yield 'tensor_data_missing.gguf', gguf([NAME], [ONE_F32]), 'lies outside the file'
    yield 'tensor_data_huge.gguf', gguf([NAME], [tinfo('t', [1 << 30, 1 << 30], ttype=F16)], b'\0' * 32), 'lies outside the file'
    yield 'tensor_alignment_64.gguf', gguf([NAME, kv_u32('general.alignment', 64)], [tinfo('a', [3]), tinfo('b', [8], offset=32)], b'\0' * 128, align=64), 'expected 64'


def main():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(root, 'tests', 'data', 'gguf_bad')
    os.makedirs(out, exist_ok=True)
    lines = []
    for name, data, expect in cases():
        assert len(data) < 4096, name
        with open(os.path.join(out, name), 'wb') as f:
            f.write(data)
        lines.append(f'{name}\t{expect}\n')
    with open(os.path.join(out, 'EXPECTED.txt'), 'w') as f:
        f.write('# file<TAB>substring the gguf reader\'s error message must contain (generated by tools/make_gguf_corpus.py)\n')
        f.writelines(lines)
    print(f'wrote {len(lines)} files to {out}')


if __name__ == '__main__':
    main()
