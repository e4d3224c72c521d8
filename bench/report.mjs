#!/usr/bin/env node
// Turns the samples bench/run.sh collected into a table (stdout) and bench/RESULTS.md.
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { execFileSync } from 'node:child_process'

const args = {}
for (let i = 2; i < process.argv.length; i += 2) args[process.argv[i].replace(/^--/, '')] = process.argv[i + 1]
const logdir = args.logdir
const types = args.types.split(/\s+/).filter(Boolean)
const q35 = args.arch === 'qwen35'
const mname = q35 ? 'qwen35 2b' : '2b'

const readJson = (f) => JSON.parse(fs.readFileSync(path.join(logdir, f), 'utf8').trim().split('\n').pop())
const samples = fs.readFileSync(path.join(logdir, 'samples.jsonl'), 'utf8').trim().split('\n').filter(Boolean).map((l) => JSON.parse(l))
const bwBefore = readJson('membw-before.json')
const bwAfter = readJson('membw-after.json')
const bw = Math.max(bwBefore.best_gbs, bwAfter.best_gbs)

const median = (v) => {
  const s = [...v].sort((x, y) => x - y)
  const n = s.length
  if (!n) return NaN
  return n % 2 ? s[(n - 1) / 2] : 0.5 * (s[n / 2 - 1] + s[n / 2])
}
const sh = (cmd, a) => {
  try {
    return execFileSync(cmd, a, { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] }).trim()
  } catch {
    return ''
  }
}
const lscpu = Object.fromEntries(
  sh('lscpu', []).split('\n').map((l) => l.split(/:\s+/)).filter((kv) => kv.length === 2),
)
const memGiB = os.totalmem() / 2 ** 30
const cpuModel = lscpu['Model name'] || os.cpus()[0]?.model || 'unknown'
const cores = `${lscpu['CPU(s)'] ?? os.cpus().length} CPUs (${lscpu['Socket(s)'] ?? '?'} socket x ${lscpu['Core(s) per socket'] ?? '?'} cores x ${lscpu['Thread(s) per core'] ?? '?'} threads)`
const hyper = lscpu['Hypervisor vendor'] ? `, virtualized (${lscpu['Hypervisor vendor']})` : ''
const flags = (lscpu.Flags || '').split(' ')
const isa = ['avx2', 'fma', 'f16c', 'avx512f', 'avx512_vnni', 'avx_vnni'].filter((f) => flags.includes(f)).join(' ')
const gitRev = args.git || sh('git', ['rev-parse', '--short', 'HEAD']) || 'no commit yet'

const fmt = (x, d = 2) => (Number.isFinite(x) ? x.toFixed(d) : 'n/a')
const rows = []
for (const t of types) {
  const bytes = readJson(`bytes-${t}.json`)
  // one sample per engine invocation: its reported median of REPS repetitions
  const get = (engine, key) => samples.filter((s) => s.type === t && s.engine === engine).map((s) => s.result[key])
  const ph = { pp: median(get('pinhole', 'prefill_tps')), tg: median(get('pinhole', 'decode_tps')) }
  const ll = { pp: median(get('llama.cpp', 'prefill_tps')), tg: median(get('llama.cpp', 'decode_tps')) }
  const bound = (bw * 1e9) / bytes.decode_bytes_per_token
  rows.push({ t, bytes, ph, ll, bound, phPct: (100 * ph.tg) / bound, llPct: (100 * ll.tg) / bound })
}

const llInfo = samples.find((s) => s.engine === 'llama.cpp')?.result ?? {}
const phInfo = samples.find((s) => s.engine === 'pinhole')?.result ?? {}
const loads = samples.flatMap((s) => [s.load_before, s.load_after])

// --- stdout table ---
const line = (c) => c.map((x, i) => String(x).padStart(i ? 12 : 8)).join(' ')
console.log(line(['model', 'pp pinhole', 'pp llama', 'pp ratio', 'tg pinhole', 'tg llama', 'tg ratio', 'tg bound']))
for (const r of rows)
  console.log(line([r.t, fmt(r.ph.pp), fmt(r.ll.pp), fmt(r.ph.pp / r.ll.pp), fmt(r.ph.tg), fmt(r.ll.tg), fmt(r.ph.tg / r.ll.tg), fmt(r.bound)]))

// --- RESULTS.md ---
const md = []
md.push(`# ${q35 ? 'Qwen3.5: ' : ''}pinhole vs llama.cpp: prefill and decode speed`)
md.push('')
md.push('Written by `bench/run.sh` (see `bench/README.md` for what is measured and how). Numbers are tokens per second,')
md.push(`for each engine and model the median over ${args.rounds} interleaved rounds (pinhole, llama.cpp, pinhole, ...) of each run's`)
md.push(`median of ${args.reps} repetition(s); higher is better.`)
md.push('')
md.push(`- date: ${new Date().toISOString().replace(/\.\d+Z$/, 'Z')}`)
md.push(`- machine: ${cpuModel}, ${cores}${hyper}; ${fmt(memGiB, 1)} GiB memory; ISA flags: ${isa || 'none of avx2/fma/f16c/avx512'}; Linux ${os.release()}`)
md.push(`- load average during the runs: ${fmt(Math.min(...loads))} to ${fmt(Math.max(...loads))} (1-minute; the machine has ${os.cpus().length} CPUs, so anything above 0 means other work shared it)`)
md.push(`- reproduce: \`${args.command}\` (from the repository root; \`bash bench/run.sh\` with the defaults)`)
md.push(`- pinhole: \`${args.pinhole}\` (source tree at ${gitRev} when the run started), kernels \`${phInfo.isa ?? '?'}\`: \`pinhole bench -m MODEL -p ${args.pp} -n ${args.tg} -r ${args.reps} -t ${args.threads}\``)
md.push(`- llama.cpp: ${args['peer-note'] ? 'built from the source of' : 'built natively for this CPU by'} \`../shared/tools/llama-peer.sh\` (${args.peer}), build ${llInfo.build ?? '?'}, its own \`llama-bench\` with flash attention ${llInfo.flash_attn ? 'on' : 'off'}, n_ubatch ${llInfo.n_ubatch}, KV ${llInfo.type_k}: \`node bench/llama_native.mjs MODEL --peer DIR --pp ${args.pp} --tg ${args.tg} --reps ${args.reps} --threads ${args.threads}\`${args['peer-note'] ? ` (${args['peer-note']})` : ''}`)
md.push(q35 ? '- models: `pinhole synth --arch qwen35 --shape 2b --type TYPE` (Qwen3.5-2B\'s LLM shapes: 18 gated delta net layers and 6 gated attention layers, random weights, tied embedding), in bench/models/'
            : '- models: `pinhole synth --shape 2b --type TYPE` (Qwen3-VL-2B-Instruct\'s LLM shapes, random weights, tied embedding), in bench/models/')
md.push('')
md.push(`## Speed (tokens/s, ${args.threads} threads)`)
md.push('')
md.push(`| model | prefill ${args.pp}: pinhole | prefill: llama.cpp | prefill ratio pinhole/llama.cpp | decode ${args.tg}: pinhole | decode: llama.cpp | decode ratio pinhole/llama.cpp |`)
md.push('| --- | ---: | ---: | ---: | ---: | ---: | ---: |')
for (const r of rows)
  md.push(`| ${mname} ${r.t} | ${fmt(r.ph.pp)} | ${fmt(r.ll.pp)} | ${fmt(r.ph.pp / r.ll.pp)} | ${fmt(r.ph.tg)} | ${fmt(r.ll.tg)} | ${fmt(r.ph.tg / r.ll.tg)} |`)
md.push('')
md.push('## Decode against the memory-bandwidth bound')
md.push('')
md.push(`Each decoded token reads every weight once: the file's tensor bytes minus the token embedding table (only one`)
md.push(`row of it is looked up), plus the output matrix — which for these tied models is the embedding table itself,`)
md.push(`read in full every token. KV-cache reads (small at these lengths) are not counted. Read bandwidth is the best pass`)
md.push(`of \`bench/membw.c\` (${args.threads} threads streaming a 1 GiB buffer; ${fmt(bwBefore.best_gbs)} GB/s before the runs, ${fmt(bwAfter.best_gbs)} GB/s after; the larger is used).`)
md.push('')
md.push('| model | bytes read per token | read bandwidth | bound (tokens/s) | pinhole decode | % of bound | llama.cpp decode | % of bound |')
md.push('| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |')
for (const r of rows)
  md.push(`| ${mname} ${r.t} | ${fmt(r.bytes.decode_bytes_per_token / 2 ** 20, 1)} MiB | ${fmt(bw)} GB/s | ${fmt(r.bound)} | ${fmt(r.ph.tg)} | ${fmt(r.phPct, 1)}% | ${fmt(r.ll.tg)} | ${fmt(r.llPct, 1)}% |`)
md.push('')
md.push('## Every sample')
md.push('')
md.push('| model | round | engine | prefill tok/s | decode tok/s | load before/after |')
md.push('| --- | ---: | --- | --- | --- | --- |')
for (const s of samples) {
  const r = s.result
  const pp = r.prefill_runs ? r.prefill_runs.map((x) => fmt(x)).join(', ') : fmt(r.prefill_tps)
  const tg = r.decode_runs ? r.decode_runs.map((x) => fmt(x)).join(', ') : fmt(r.decode_tps)
  md.push(`| ${s.type} | ${s.round} | ${s.engine} | ${pp} | ${tg} | ${fmt(s.load_before)} / ${fmt(s.load_after)} |`)
}
md.push('')
md.push('## Read this before quoting the numbers')
md.push('')
md.push('- **The llama.cpp side is llama.cpp at its best on this CPU**: built with the native flags (AVX2 / AVX-512 as the')
md.push('  CPU has them, its repacked weight layouts and its own tiled kernels), measured by its own llama-bench, interleaved')
md.push('  with pinhole run by run. Earlier tables compared against @fugood/llama.node, a portable build without AVX; those')
md.push('  ratios (7-34x) said nothing about llama.cpp proper and are gone.')
md.push('- Both engines: prefill = one batch of PP tokens into an empty KV cache; decode = TG single-token steps starting')
md.push('  from an empty cache; token ids are arbitrary (fixed for pinhole, random for llama-bench); the weights are')
md.push('  random, so the output is meaningless and only the speed counts. Model loading and one warm-up pass are untimed')
md.push('  in both.')
md.push(`- The machine may be shared: runs are interleaved so that background load hits both engines alike; check the load column.`)
md.push('')
// keep the sections the other benchmarks write: everything from the first
// section after this report's own ones (pictures, chat, restart, ...) on
let kept = ''
if (fs.existsSync(args.out)) {
  const old = fs.readFileSync(args.out, 'utf8')
  const own = /^## (Speed|Decode against the memory-bandwidth bound|Every sample|Read this before quoting the numbers)\b/
  const lines = old.split('\n')
  let i = lines.findIndex((l, k) => k > 0 && l.startsWith('## ') && !own.test(l))
  if (i > 0 && /^<!-- \w+:begin -->$/.test(lines[i - 1])) i-- // a section another script replaces by its markers
  if (i >= 0) kept = '\n' + lines.slice(i).join('\n')
}
fs.writeFileSync(args.out, md.join('\n') + kept)
