#!/usr/bin/env node
// Weight bytes a decode step reads, from a GGUF file's tensor table.
//
//   node bench/gguf_bytes.mjs MODEL.gguf
//
// Prints one JSON line:
//   total_weight_bytes   every tensor's data (what the file stores after the header)
//   token_embd_bytes     token_embd.weight (a lookup: decode reads one row of it)
//   output_bytes         output.weight, or 0 when the embedding is tied
//   tied                 true when there is no output.weight (token_embd is the LM head)
//   decode_bytes_per_token  total - token_embd (+ token_embd again when tied, since the
//                        tied embedding is read in full as the output matrix each token)
// KV-cache reads and the one embedding row are not counted (small at short contexts).
import fs from 'node:fs'

// ggml type id -> [block size in elements, bytes per block]
const TYPES = {
  0: [1, 4], // F32
  1: [1, 2], // F16
  2: [32, 18], // Q4_0
  3: [32, 20], // Q4_1
  6: [32, 22], // Q5_0
  7: [32, 24], // Q5_1
  8: [32, 34], // Q8_0
  9: [32, 36], // Q8_1
  10: [256, 84], // Q2_K
  11: [256, 110], // Q3_K
  12: [256, 144], // Q4_K
  13: [256, 176], // Q5_K
  14: [256, 210], // Q6_K
  15: [256, 292], // Q8_K
  24: [1, 1], // I8
  25: [1, 2], // I16
  26: [1, 4], // I32
  27: [1, 8], // I64
  28: [1, 8], // F64
  30: [1, 2], // BF16
}

export function ggufWeightBytes(file) {
  const fd = fs.openSync(file, 'r')
  const fileSize = fs.fstatSync(fd).size
  let buf = Buffer.alloc(0)
  let bufStart = 0
  let pos = 0
  const need = (n) => {
    if (pos + n <= bufStart + buf.length) return
    const len = Math.max(n, 1 << 22)
    const b = Buffer.alloc(len)
    const got = fs.readSync(fd, b, 0, len, pos)
    if (got < n) throw new Error(`${file}: truncated GGUF header`)
    buf = b.subarray(0, got)
    bufStart = pos
  }
  const u32 = () => { need(4); const v = buf.readUInt32LE(pos - bufStart); pos += 4; return v }
  const u64 = () => { need(8); const v = buf.readBigUInt64LE(pos - bufStart); pos += 8; return Number(v) }
  const str = () => { const n = u64(); need(n); const s = buf.toString('utf8', pos - bufStart, pos - bufStart + n); pos += n; return s }
  const SCALAR = { 0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8 }
  const skipValue = (t) => {
    if (t === 8) { str(); return }
    if (t === 9) {
      const et = u32(); const n = u64()
      if (et === 8) { for (let i = 0; i < n; i++) str() } else if (SCALAR[et]) { pos += SCALAR[et] * n } else throw new Error(`bad array type ${et}`)
      return
    }
    if (!SCALAR[t]) throw new Error(`bad metadata type ${t}`)
    pos += SCALAR[t]
  }
  const readValue = (t) => {
    if (t === 4) return u32()
    if (t === 8) return str()
    skipValue(t)
    return undefined
  }

  need(4)
  if (buf.toString('latin1', 0, 4) !== 'GGUF') throw new Error(`${file}: not a GGUF file`)
  pos = 4
  const version = u32()
  if (version < 2) throw new Error(`${file}: GGUF v${version} unsupported`)
  const nTensors = u64()
  const nKv = u64()
  let alignment = 32
  for (let i = 0; i < nKv; i++) {
    const key = str()
    const t = u32()
    const v = readValue(t)
    if (key === 'general.alignment' && typeof v === 'number') alignment = v
  }
  const tensors = []
  for (let i = 0; i < nTensors; i++) {
    const name = str()
    const nd = u32()
    let ne = 1
    const dims = []
    for (let d = 0; d < nd; d++) { const x = u64(); dims.push(x); ne *= x }
    const type = u32()
    const offset = u64()
    tensors.push({ name, type, dims, ne, offset })
  }
  fs.closeSync(fd)
  const dataStart = Math.ceil(pos / alignment) * alignment
  const byOffset = [...tensors].sort((a, b) => a.offset - b.offset)
  byOffset.forEach((t, i) => {
    const tt = TYPES[t.type]
    if (tt) t.bytes = (t.ne / tt[0]) * tt[1]
    else t.bytes = (i + 1 < byOffset.length ? byOffset[i + 1].offset : fileSize - dataStart) - t.offset
  })
  const total = tensors.reduce((s, t) => s + t.bytes, 0)
  const emb = tensors.find((t) => t.name === 'token_embd.weight')
  const out = tensors.find((t) => t.name === 'output.weight')
  const embBytes = emb ? emb.bytes : 0
  const tied = !out
  return {
    file: file.split('/').pop(),
    file_bytes: fileSize,
    n_tensors: nTensors,
    total_weight_bytes: total,
    token_embd_bytes: embBytes,
    output_bytes: out ? out.bytes : 0,
    tied,
    decode_bytes_per_token: total - embBytes + (tied ? embBytes : 0),
  }
}

if (import.meta.url === `file://${process.argv[1]}` || process.argv[1]?.endsWith('gguf_bytes.mjs')) {
  const f = process.argv[2]
  if (!f) {
    process.stderr.write('usage: node bench/gguf_bytes.mjs MODEL.gguf\n')
    process.exit(2)
  }
  process.stdout.write(JSON.stringify(ggufWeightBytes(f)) + '\n')
}
