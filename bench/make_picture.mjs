#!/usr/bin/env node
// Writes a deterministic RGB PNG of the given size (smooth gradients plus a
// pattern, so the picture is not trivially compressible or uniform).
//   node bench/make_picture.mjs WIDTH HEIGHT OUT.png [VARIANT]
// VARIANT (default 0) gives another picture of the same size.
import fs from 'node:fs'
import zlib from 'node:zlib'

const [w, h, out] = [Number(process.argv[2]), Number(process.argv[3]), process.argv[4]]
const variant = Number(process.argv[5] || 0)
if (!(w > 0 && h > 0 && out)) {
  process.stderr.write('usage: node bench/make_picture.mjs WIDTH HEIGHT OUT.png\n')
  process.exit(2)
}
const crcTable = Array.from({ length: 256 }, (_, n) => {
  let c = n
  for (let k = 0; k < 8; k++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1
  return c >>> 0
})
const crc32 = (buf) => {
  let c = 0xffffffff
  for (const b of buf) c = crcTable[(c ^ b) & 0xff] ^ (c >>> 8)
  return (c ^ 0xffffffff) >>> 0
}
const chunk = (type, data) => {
  const len = Buffer.alloc(4)
  len.writeUInt32BE(data.length)
  const td = Buffer.concat([Buffer.from(type, 'latin1'), data])
  const crc = Buffer.alloc(4)
  crc.writeUInt32BE(crc32(td))
  return Buffer.concat([len, td, crc])
}
const raw = Buffer.alloc((w * 3 + 1) * h)
for (let y = 0; y < h; y++) {
  raw[y * (w * 3 + 1)] = 0 // filter: none
  for (let x = 0; x < w; x++) {
    const o = y * (w * 3 + 1) + 1 + x * 3
    raw[o] = (x * 255 / w) | 0
    raw[o + 1] = (y * 255 / h) | 0
    raw[o + 2] = (((x ^ y) & 0x3f) * 4 + variant * 97) & 0xff
  }
}
const ihdr = Buffer.alloc(13)
ihdr.writeUInt32BE(w, 0)
ihdr.writeUInt32BE(h, 4)
ihdr[8] = 8 // bit depth
ihdr[9] = 2 // RGB
fs.writeFileSync(out, Buffer.concat([
  Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]),
  chunk('IHDR', ihdr), chunk('IDAT', zlib.deflateSync(raw)), chunk('IEND', Buffer.alloc(0)),
]))
