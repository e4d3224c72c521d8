#!/usr/bin/env python3
"""Writes the picture test data of tests/test_image.c (stdlib only):

  tests/data/images_bad/  hostile or broken files that the decoder must refuse
                          quickly, and EXPECTED.txt: for each file a substring
                          of the error message it must give.
  tests/data/images_ok/   small PNG and GIF files covering every bit depth,
                          colour type, interlacing, palettes, transparency,
                          GIF frames and EXIF orientation, each with NAME.ppm:
                          the RGB8 pixels it must decode to, computed here
                          independently of the C code (alpha dropped, 16-bit
                          samples reduced to their high byte).

JPEG and WebP test pictures are made by the C test with libturbojpeg and
libwebp; the few JPEG and WebP files below are tiny ones made once with cjpeg
and cwebp and kept here as hex.

Usage: tools/make_image_corpus.py [tests/data]
"""
import os
import random
import struct
import sys
import zlib

# A 16x16 baseline JPEG (cjpeg -quality 80).
JPEG_BASE = bytes.fromhex(
    'ffd8ffe000104a46494600010100000100010000ffdb00430006040506050406060506070706080a100a0a09090a140e0f0c1017141818'
    '171416161a1d251f1a1b231c1616202c20232627292a29191f2d302d283025282928ffdb0043010707070a080a130a0a13281a161a2828'
    '282828282828282828282828282828282828282828282828282828282828282828282828282828282828282828282828ffc00011080010'
    '001003012200021101031101ffc4001f0000010501010101010100000000000000000102030405060708090a0bffc400b5100002010303'
    '020403050504040000017d01020300041105122131410613516107227114328191a1082342b1c11552d1f02433627282090a161718191a'
    '25262728292a3435363738393a434445464748494a535455565758595a636465666768696a737475767778797a838485868788898a9293'
    '9495969798999aa2a3a4a5a6a7a8a9aab2b3b4b5b6b7b8b9bac2c3c4c5c6c7c8c9cad2d3d4d5d6d7d8d9dae1e2e3e4e5e6e7e8e9eaf1f2'
    'f3f4f5f6f7f8f9faffc4001f0100030101010101010101010000000000000102030405060708090a0bffc400b511000201020404030407'
    '05040400010277000102031104052131061241510761711322328108144291a1b1c109233352f0156272d10a162434e125f11718191a26'
    '2728292a35363738393a434445464748494a535455565758595a636465666768696a737475767778797a82838485868788898a92939495'
    '969798999aa2a3a4a5a6a7a8a9aab2b3b4b5b6b7b8b9bac2c3c4c5c6c7c8c9cad2d3d4d5d6d7d8d9dae2e3e4e5e6e7e8e9eaf2f3f4f5f6'
    'f7f8f9faffda000c03010002110311003f00f1fd17c33f77e4fd2bbdd17c33f77e4fd2bb1d17c33f77e4fd2bbdd17c33f77e4fd28a15c3'
    '86789b6d4fffd9')
# The segments of a 16x16 grey progressive JPEG (cjpeg -grayscale -progressive
# -quality 50), split so that a scan can be repeated.
JPEG_PROG_HEAD = bytes.fromhex(
    'ffd8ffe000104a46494600010100000100010000ffdb004300100b0c0e0c0a100e0d0e1211101318281a181616183123251d283a333d3c'
    '3933383740485c4e404457453738506d51575f626768673e4d71797064785c656763ffc2000b080010001001011100ffc4001500010100'
    '000000000000000000000000000405ffda00080101000000019ab4b3')
JPEG_PROG_DC_REFINE = bytes.fromhex('ffda00080101000000106f')  # Ah=1, Al=0
# A 16x16 lossy WebP (cwebp -q 50).
WEBP_LOSSY = bytes.fromhex(
    '5249464640000000574542505650382034000000f001009d012a1000100002c04c25b002b0010f0c12f2ca8000fef9527d589c1ae2be53'
    '069d4783ebddcffbb28cffc50799e00000')

PNG_SIG = b'\x89PNG\r\n\x1a\n'


# ---- PNG ------------------------------------------------------------------

def chunk(ctype, data):
    return struct.pack('>I', len(data)) + ctype + data + struct.pack('>I', zlib.crc32(ctype + data) & 0xffffffff)


def ihdr(w, h, depth, ctype, interlace=0):
    return chunk(b'IHDR', struct.pack('>IIBBBBB', w, h, depth, ctype, 0, 0, interlace))


CHANNELS = {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}


def pack_row(samples, depth):
    """Packs one row of samples (ints) at a bit depth, MSB first."""
    if depth == 16:
        return b''.join(struct.pack('>H', s) for s in samples)
    if depth == 8:
        return bytes(samples)
    out, acc, nbits = bytearray(), 0, 0
    for s in samples:
        acc = (acc << depth) | s
        nbits += depth
        if nbits == 8:
            out.append(acc)
            acc, nbits = 0, 0
    if nbits:
        out.append(acc << (8 - nbits))
    return bytes(out)


def filter_rows(rows, bpp):
    """Filters each row with filter type (row index mod 5), so every type
    (None, Sub, Up, Average, Paeth) is exercised."""
    out, prev = bytearray(), None
    for i, row in enumerate(rows):
        ftype = i % 5
        up = prev if prev is not None else bytes(len(row))
        f = bytearray()
        for j, x in enumerate(row):
            a = row[j - bpp] if j >= bpp else 0
            b = up[j]
            c = up[j - bpp] if j >= bpp else 0
            if ftype == 0:
                pred = 0
            elif ftype == 1:
                pred = a
            elif ftype == 2:
                pred = b
            elif ftype == 3:
                pred = (a + b) // 2
            else:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                pred = a if pa <= pb and pa <= pc else (b if pb <= pc else c)
            f.append((x - pred) & 0xff)
        out.append(ftype)
        out += f
        prev = row
    return bytes(out)


ADAM7 = [(0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4), (0, 2, 2, 4), (1, 0, 2, 2), (0, 1, 1, 2)]


def png_bytes(w, h, depth, ctype, pix, interlace=0, extra_before_idat=b''):
    """pix[y][x] is a tuple of samples for the colour type."""
    ch = CHANNELS[ctype]
    bpp = max(1, ch * depth // 8)
    if interlace:
        data = b''
        for x0, y0, dx, dy in ADAM7:
            xs, ys = range(x0, w, dx), range(y0, h, dy)
            if not xs or not ys:
                continue
            rows = [pack_row([s for x in xs for s in pix[y][x]], depth) for y in ys]
            data += filter_rows(rows, bpp)
    else:
        rows = [pack_row([s for x in range(w) for s in pix[y][x]], depth) for y in range(h)]
        data = filter_rows(rows, bpp)
    return (PNG_SIG + ihdr(w, h, depth, ctype, interlace) + extra_before_idat + chunk(b'IDAT', zlib.compress(data)) +
            chunk(b'IEND', b''))


def ppm(w, h, rgb):
    return b'P6\n%d %d\n255\n' % (w, h) + bytes(v for px in rgb for v in px)


def grid(w, h, f):
    return [[f(x, y) for x in range(w)] for y in range(h)]


def exif_tiff(orientation, big_endian):
    """A minimal TIFF block: IFD0 with one entry, Orientation (SHORT)."""
    e = '>' if big_endian else '<'
    head = (b'MM' if big_endian else b'II') + struct.pack(e + 'HI', 42, 8)
    ifd = struct.pack(e + 'H', 1) + struct.pack(e + 'HHIH', 0x0112, 3, 1, orientation) + b'\0\0' + struct.pack(e + 'I', 0)
    return head + ifd


def rotate_cw(rows):
    return [list(r) for r in zip(*rows[::-1])]


def ok_pngs():
    """(name, png bytes, w, h, expected rgb rows)."""
    W, H = 7, 5
    out = []

    def samp(x, y, c, depth):  # well-spread sample values
        return ((x * 37 + y * 91 + c * 53 + x * y * 7 + 1) * 2654435761 >> 9) % (1 << depth)

    for depth in (1, 2, 4, 8, 16):
        pix = grid(W, H, lambda x, y: (samp(x, y, 0, depth),))
        scale = {1: 255, 2: 85, 4: 17, 8: 1}.get(depth)
        exp = [[(v * scale,) * 3 if depth < 16 else (v >> 8,) * 3 for (v,) in row] for row in pix]
        if depth == 16:  # values whose low byte would round the other way
            pix[0][0], exp[0][0] = (0x01c0,), (1, 1, 1)
            pix[0][1], exp[0][1] = (0xff7f,), (255, 255, 255)
        out.append(('grey%d' % depth, png_bytes(W, H, depth, 0, pix), W, H, exp))
    for depth in (8, 16):
        pix = grid(W, H, lambda x, y: (samp(x, y, 0, depth), samp(x, y, 3, depth)))
        exp = [[(v if depth == 8 else v >> 8,) * 3 for (v, a) in row] for row in pix]
        out.append(('greyalpha%d' % depth, png_bytes(W, H, depth, 4, pix), W, H, exp))
        for ctype, name in ((2, 'rgb'), (6, 'rgba')):
            n = CHANNELS[ctype]
            pix = grid(W, H, lambda x, y: tuple(samp(x, y, c, depth) for c in range(n)))
            exp = [[tuple(v if depth == 8 else v >> 8 for v in px[:3]) for px in row] for row in pix]
            out.append(('%s%d' % (name, depth), png_bytes(W, H, depth, ctype, pix), W, H, exp))
    for depth in (1, 2, 4, 8):
        n = 1 << depth
        pal = [((i * 67 + 13) % 256, (i * 29 + 101) % 256, (i * 151 + 7) % 256) for i in range(n)]
        trns = chunk(b'tRNS', bytes((i * 97) % 256 for i in range(n)))  # alpha per entry: dropped
        pix = grid(W, H, lambda x, y: (samp(x, y, 0, depth),))
        exp = [[pal[v] for (v,) in row] for row in pix]
        extra = chunk(b'PLTE', b''.join(bytes(c) for c in pal)) + trns
        out.append(('palette%d' % depth, png_bytes(W, H, depth, 3, pix, extra_before_idat=extra), W, H, exp))

    # Interlaced, with sizes that leave some Adam7 passes empty or partial.
    for (w, h) in ((9, 11), (3, 2)):
        pix = grid(w, h, lambda x, y: tuple(samp(x, y, c, 8) for c in range(3)))
        out.append(('interlaced_rgb8_%dx%d' % (w, h), png_bytes(w, h, 8, 2, pix, interlace=1), w, h, pix))
    pix = grid(9, 11, lambda x, y: (samp(x, y, 0, 16),))
    out.append(('interlaced_grey16', png_bytes(9, 11, 16, 0, pix, interlace=1), 9, 11,
                [[(v >> 8,) * 3 for (v,) in row] for row in pix]))
    pal = [(i * 60, 255 - i * 60, 100) for i in range(4)]
    pix = grid(9, 11, lambda x, y: ((x + 2 * y) % 4,))
    out.append(('interlaced_palette2', png_bytes(9, 11, 2, 3, pix, interlace=1,
                                                 extra_before_idat=chunk(b'PLTE', b''.join(bytes(c) for c in pal))),
                9, 11, [[pal[v] for (v,) in row] for row in pix]))

    # EXIF orientation in an eXIf chunk: 6 = turn 90 degrees clockwise.
    pix = grid(W, H, lambda x, y: tuple(samp(x, y, c, 8) for c in range(3)))
    exif = chunk(b'eXIf', exif_tiff(6, big_endian=True))
    out.append(('exif6', png_bytes(W, H, 8, 2, pix, extra_before_idat=exif), H, W, rotate_cw(pix)))
    return out


# ---- GIF ------------------------------------------------------------------

def lzw_encode(indices, min_size):
    """GIF LZW: codes packed LSB first, the width growing as the decoder
    expects; a clear code restarts the table long before it is full."""
    clear, eoi = 1 << min_size, (1 << min_size) + 1
    out, acc, nbits = bytearray(), 0, 0

    def emit(code, size):
        nonlocal acc, nbits
        acc |= code << nbits
        nbits += size
        while nbits >= 8:
            out.append(acc & 0xff)
            acc >>= 8
            nbits -= 8

    def reset():
        return {bytes([i]): i for i in range(clear)}, eoi + 1, min_size + 1

    table, next_code, size = reset()
    emit(clear, size)
    w = b''
    for k in indices:
        wk = w + bytes([k])
        if wk in table:
            w = wk
            continue
        emit(table[w], size)
        if next_code < 4000:
            table[wk] = next_code
            next_code += 1
            if next_code > (1 << size) and size < 12:
                size += 1
        else:
            emit(clear, size)
            table, next_code, size = reset()
        w = bytes([k])
    if w:
        emit(table[w], size)
    emit(eoi, size)
    if nbits:
        out.append(acc & 0xff)
    return bytes(out)


def sub_blocks(data):
    return b''.join(bytes([len(data[i:i + 255])]) + data[i:i + 255] for i in range(0, len(data), 255)) + b'\0'


def colour_table(pal):
    bits = max(1, (len(pal) - 1).bit_length())
    pal = pal + [(0, 0, 0)] * ((1 << bits) - len(pal))
    return bits, b''.join(bytes(c) for c in pal)


def gif_bytes(sw, sh, gpal, bg, frames_rows, left, top, fw, fh, lpal=None, interlace=False, transparent=None,
              version=b'GIF89a'):
    out = version
    flags = 0
    gtab = b''
    if gpal:
        bits, gtab = colour_table(gpal)
        flags = 0x80 | ((bits - 1) << 4) | (bits - 1)
    out += struct.pack('<HHBBB', sw, sh, flags, bg, 0) + gtab
    if transparent is not None:
        out += b'\x21\xf9\x04' + bytes([1, 0, 0, transparent]) + b'\0'
    out += b'\x21\xfe' + sub_blocks(b'a comment to skip')
    iflags, ltab = 0, b''
    if lpal:
        bits, ltab = colour_table(lpal)
        iflags = 0x80 | (bits - 1)
    if interlace:
        iflags |= 0x40
    out += b',' + struct.pack('<HHHHB', left, top, fw, fh, iflags) + ltab
    order = list(range(fh))
    if interlace:
        order = [y for start, step in ((0, 8), (4, 8), (2, 4), (1, 2)) for y in range(start, fh, step)]
    indices = [v for y in order for v in frames_rows[y]]
    ncolours = len(lpal or gpal)
    min_size = max(2, (ncolours - 1).bit_length())
    out += bytes([min_size]) + sub_blocks(lzw_encode(indices, min_size))
    return out + b';'


def ok_gifs():
    out = []
    pal = [((i * 40) % 256, (255 - i * 30) % 256, (i * 90) % 256) for i in range(8)]
    rows = [[(x * 3 + y * 5) % 8 for x in range(7)] for y in range(5)]
    exp = [[pal[v] for v in r] for r in rows]
    out.append(('gif_basic', gif_bytes(7, 5, pal, 0, rows, 0, 0, 7, 5), 7, 5, exp))
    out.append(('gif87a', gif_bytes(7, 5, pal, 0, rows, 0, 0, 7, 5, version=b'GIF87a'), 7, 5, exp))

    rows = [[(x + y * 3) % 8 for x in range(7)] for y in range(13)]
    out.append(('gif_interlaced', gif_bytes(7, 13, pal, 0, rows, 0, 0, 7, 13, interlace=True), 7, 13,
                [[pal[v] for v in r] for r in rows]))

    # A frame smaller than the screen, with its own colour table and a
    # transparent index (shown as its palette colour: alpha is dropped).
    gpal = [(1, 2, 3), (4, 5, 6), (10, 20, 30), (7, 8, 9)]
    lpal = [(200, 0, 0), (0, 200, 0), (0, 0, 200), (90, 90, 90)]
    rows = [[(x + y) % 4 for x in range(4)] for y in range(3)]
    exp = [[(10, 20, 30)] * 9 for _ in range(7)]
    for y in range(3):
        for x in range(4):
            exp[2 + y][3 + x] = lpal[rows[y][x]]
    out.append(('gif_frame_offset', gif_bytes(9, 7, gpal, 2, rows, 3, 2, 4, 3, lpal=lpal, transparent=1), 9, 7, exp))

    # A 0x0 screen and no global table: the frame sizes the canvas, the rest
    # is black.
    rows = [[(x * y) % 4 for x in range(5)] for y in range(4)]
    exp = [[(0, 0, 0)] * 6 for _ in range(5)]
    for y in range(4):
        for x in range(5):
            exp[1 + y][1 + x] = lpal[rows[y][x]]
    out.append(('gif_grow', gif_bytes(0, 0, None, 0, rows, 1, 1, 5, 4, lpal=lpal), 6, 5, exp))
    return out


# ---- hostile files --------------------------------------------------------

def bad_files():
    """(name, bytes, substring of the expected error)."""
    ok_png = png_bytes(32, 32, 8, 2, grid(32, 32, lambda x, y: ((x * 8) % 256, (y * 8) % 256, 77)))
    idat_at = ok_png.index(b'IDAT') - 4
    bad_crc = bytearray(ok_png)
    bad_crc[8 + 8 + 13] ^= 0x40  # IHDR's CRC
    gif = gif_bytes(7, 5, [(0, 0, 0), (255, 255, 255)], 0,
                    [[(x + y) % 2 for x in range(7)] for y in range(5)], 0, 0, 7, 5)
    rnd = random.Random(20240601)
    sof = JPEG_BASE.index(b'\xff\xc0')
    jpeg_huge = JPEG_BASE[:sof + 5] + struct.pack('>HH', 65000, 65000) + JPEG_BASE[sof + 9:]
    sos = JPEG_BASE.index(b'\xff\xda')

    def png_header_only(w, h, depth=8, ctype=2):
        # A tiny deflate stream of zeros stands for the (never decoded) data.
        return PNG_SIG + ihdr(w, h, depth, ctype) + chunk(b'IDAT', zlib.compress(b'\0' * 4096, 9)) + chunk(b'IEND', b'')

    def riff(chunks):
        body = b'WEBP' + b''.join(c for c in chunks)
        return b'RIFF' + struct.pack('<I', len(body)) + body

    # VP8L header: signature 0x2f, then 14-bit width-1 and height-1.
    vp8l_huge = b'VP8L' + struct.pack('<I', 5) + bytes([0x2f]) + struct.pack('<I', (16383) | (16383 << 14)) + b'\0'

    return [
        ('empty.bin', b'', 'the file is empty'),
        ('random.bin', bytes([0x42, 0x00]) + bytes(rnd.getrandbits(8) for _ in range(510)),
         'not a PNG, JPEG, WebP or GIF'),
        ('picture.bmp', b'BM' + bytes(60), 'BMP pictures are not supported'),
        ('png_signature_only.png', PNG_SIG, 'PNG data is truncated'),
        ('png_truncated.png', ok_png[:idat_at + 40], 'PNG data is truncated'),
        ('png_100000x100000.png', png_header_only(100000, 100000), 'PNG is 100000x100000, more than the 16384-pixel side limit'),
        ('png_side_20000.png', png_header_only(20000, 16), 'PNG is 20000x16, more than the 16384-pixel side limit'),
        ('png_100_megapixels.png', png_header_only(10000, 10000), 'more than the 67108864-pixel limit'),
        ('png_zero_width.png', png_header_only(0, 10), 'PNG has an empty size'),
        # A decompression bomb's header: 16384x16384 one-bit grey (32 MiB of
        # bits, 256 megapixels of RGB) in 83 bytes; refused before inflating.
        ('png_bomb.png', png_header_only(16384, 16384, 1, 0), 'more than the 67108864-pixel limit'),
        ('png_bad_crc.png', bytes(bad_crc), 'invalid chunk checksum'),
        ('png_bad_data.png', ok_png[:idat_at + 8 + 3] + b'\xff' + ok_png[idat_at + 8 + 4:], 'PNG is corrupt'),
        ('png_bad_depth.png', PNG_SIG + ihdr(4, 4, 3, 2) + chunk(b'IEND', b''), 'PNG is corrupt'),
        ('jpeg_soi_only.jpg', b'\xff\xd8\xff', 'JPEG header is invalid'),
        ('jpeg_tables_only.jpg', JPEG_BASE[:JPEG_BASE.index(b'\xff\xc0')] + b'\xff\xd9', 'JPEG header is invalid'),
        ('jpeg_header_cut.jpg', JPEG_BASE[:sos - 100], 'JPEG header is invalid'),
        ('jpeg_truncated.jpg', JPEG_BASE[:-30], 'JPEG data is truncated'),
        ('jpeg_65000x65000.jpg', jpeg_huge, 'JPEG is 65000x65000, more than the 16384-pixel side limit'),
        # 600 copies of one refinement scan: libjpeg would make a pass over
        # the picture for each; the scan limit refuses it.
        ('jpeg_600_scans.jpg', JPEG_PROG_HEAD + JPEG_PROG_DC_REFINE * 600 + b'\xff\xd9', 'more than 500 scans'),
        ('webp_truncated.webp', WEBP_LOSSY[:50], 'WebP data is truncated'),
        ('webp_header_only.webp', WEBP_LOSSY[:12], 'WebP data is truncated'),
        ('webp_16384x16384.webp', riff([vp8l_huge]), 'more than the 67108864-pixel limit'),
        ('webp_garbage.webp', riff([b'VP8 ' + struct.pack('<I', 16) + bytes(16)]), 'WebP is corrupt'),
        ('gif_truncated.gif', gif[:-8], 'GIF data is truncated'),
        ('gif_header_only.gif', b'GIF89a\x07\x00', 'GIF data is truncated'),
        ('gif_65535x65535.gif', b'GIF89a' + struct.pack('<HHBBB', 65535, 65535, 0, 0, 0) + b';',
         'GIF is 65535x65535, more than the 16384-pixel side limit'),
        ('gif_frame_far_away.gif', b'GIF89a' + struct.pack('<HHBBB', 10, 10, 0, 0, 0) + b',' +
         struct.pack('<HHHHB', 60000, 0, 10, 10, 0) + b'\x02\x02\x4c\x01\x00;', 'GIF is 60010x10, more than the 16384-pixel side limit'),
        ('gif_no_image.gif', b'GIF89a' + struct.pack('<HHBBB', 4, 4, 0, 0, 0) + b';', 'GIF has no image'),
    ]


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), '..', 'tests', 'data')
    bad_dir, ok_dir = os.path.join(root, 'images_bad'), os.path.join(root, 'images_ok')
    for d in (bad_dir, ok_dir):
        os.makedirs(d, exist_ok=True)
    lines = ['# file<TAB>substring of the decoder\'s error (generated by tools/make_image_corpus.py)']
    for name, data, expect in bad_files():
        with open(os.path.join(bad_dir, name), 'wb') as f:
            f.write(data)
        lines.append('%s\t%s' % (name, expect))
    with open(os.path.join(bad_dir, 'EXPECTED.txt'), 'w') as f:
        f.write('\n'.join(lines) + '\n')
    for ext, items in (('png', ok_pngs()), ('gif', ok_gifs())):
        for name, data, w, h, exp in items:
            assert len(exp) == h and all(len(r) == w for r in exp), name
            with open(os.path.join(ok_dir, '%s.%s' % (name, ext)), 'wb') as f:
                f.write(data)
            with open(os.path.join(ok_dir, '%s.ppm' % name), 'wb') as f:
                f.write(ppm(w, h, [px for row in exp for px in row]))


if __name__ == '__main__':
    main()
