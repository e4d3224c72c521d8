#!/usr/bin/env node
// Renders the per-turn results of bench/chat.mjs (JSON lines, from one or
// more files) as a Markdown table: pinhole and the native llama-server side by
// side (llama.node's rows, engine "llama.cpp", in a column of their own).
//   node bench/chat_table.mjs RESULTS.jsonl [MORE.jsonl ...]
import fs from 'node:fs'

const rows = process.argv.slice(2).flatMap((f) => fs.readFileSync(f, 'utf8').trim().split('\n').filter(Boolean))
  .map((l) => JSON.parse(l))
const by = new Map()
for (const r of rows) {
  const k = `${r.sequence} ${r.turn}`
  if (!by.has(k)) by.set(k, {})
  by.get(k)[r.engine] = r
}
const f = (x) => (x === undefined ? '-' : x.toFixed(2))
const node = rows.some((r) => r.engine === 'llama.cpp')
let out = '| sequence | turn | pinhole TTFT s | prefilled | reused | of which from RAM | encoded | llama-server (native) TTFT s | llama-server / pinhole |' +
          (node ? ' llama.node (no AVX) TTFT s |' : '') + '\n' + '|---|---|---|---|---|---|---|---|---|' + (node ? '---|' : '') + '\n'
for (const [k, v] of by) {
  const [seq, turn] = k.split(' ')
  const p = v.pinhole, l = v['llama-server'], n = v['llama.cpp']
  out += `| ${seq} | ${turn} | ${f(p?.ttft_s)} | ${p?.prefilled ?? '-'} | ${p?.reused ?? '-'} | ${p?.from_ram ?? '-'} | ${p?.encoded ?? '-'} | ` +
         `${f(l?.ttft_s)} | ${p && l ? (l.ttft_s / p.ttft_s).toFixed(1) + 'x' : '-'} |` + (node ? ` ${f(n?.ttft_s)} |` : '') + '\n'
}
process.stdout.write(out)
