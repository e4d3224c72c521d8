#!/usr/bin/env node
// The table of bench/depth.sh's lines: per depth, the median prefill and
// decode speed of the two binaries and their ratio (after / before).
//   node bench/depth_table.mjs results.jsonl
import fs from 'node:fs'

const file = process.argv[2]
if (!file) { process.stderr.write('usage: node bench/depth_table.mjs results.jsonl\n'); process.exit(2) }
const runs = fs.readFileSync(file, 'utf8').split('\n').filter(Boolean).map((l) => JSON.parse(l))
const median = (a) => { const s = [...a].sort((x, y) => x - y); const n = s.length; return n % 2 ? s[(n - 1) / 2] : (s[n / 2 - 1] + s[n / 2]) / 2 }
const depths = [...new Set(runs.map((r) => r.depth))].sort((a, b) => a - b)
const fmt = (v) => v.toFixed(2)
console.log('| depth | prefill before | prefill after | ratio | decode before | decode after | ratio | runs | load average |')
console.log('|---:|---:|---:|---:|---:|---:|---:|---:|---|')
for (const d of depths) {
  const of = (w, k) => runs.filter((r) => r.depth === d && r.which === w).map((r) => r.bench[k])
  const pb = median(of('before', 'prefill_tps')), pa = median(of('after', 'prefill_tps'))
  const db = median(of('before', 'decode_tps')), da = median(of('after', 'decode_tps'))
  const loads = runs.filter((r) => r.depth === d).map((r) => r.load)
  console.log(`| ${d} | ${fmt(pb)} | ${fmt(pa)} | ${(pa / pb).toFixed(3)} | ${fmt(db)} | ${fmt(da)} | ${(da / db).toFixed(3)} | ` +
              `${of('before', 'prefill_tps').length} + ${of('after', 'prefill_tps').length} | ${Math.min(...loads)}-${Math.max(...loads)} |`)
}
