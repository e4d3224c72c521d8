#!/usr/bin/env node
// llama.cpp side of the pinhole benchmark: llama-bench of the native peer
// build (../shared/tools/llama-peer.sh: llama.cpp built for this CPU).
//
//   node bench/llama_native.mjs MODEL.gguf --peer BIN_DIR [--pp 512] [--tg 128] [--reps 3] [--threads 2]
//
// Prints one JSON line with prefill_tps and decode_tps (the mean of llama-bench's
// --reps samples; each sample also listed), measured as `pinhole bench` does:
// prefill of PP tokens in one batch into an empty context, decode of TG tokens
// one at a time from an empty context; flash attention on (as pinhole computes
// attention), F16 KV cache, n_ubatch 512 (llama-bench's defaults otherwise).
import { execFileSync } from 'node:child_process'

const argv = process.argv.slice(2)
const opts = { pp: 512, tg: 128, reps: 3, threads: 2, peer: null, model: null }
for (let i = 0; i < argv.length; i++) {
  const a = argv[i]
  if (a.startsWith('--')) opts[a.slice(2)] = argv[++i]
  else opts.model = a
}
if (!opts.model || !opts.peer) {
  process.stderr.write('usage: node bench/llama_native.mjs MODEL.gguf --peer BIN_DIR [--pp 512] [--tg 128] [--reps 3] [--threads 2]\n')
  process.exit(2)
}
const run = (extra) => JSON.parse(execFileSync(`${opts.peer}/llama-bench`,
  ['-m', opts.model, '-t', String(opts.threads), '-r', String(opts.reps), '-fa', '1', '-o', 'json', ...extra],
  { encoding: 'utf8', env: { ...process.env, LD_LIBRARY_PATH: opts.peer }, stdio: ['ignore', 'pipe', 'pipe'], maxBuffer: 1 << 24 }))
const pp = Number(opts.pp) > 0 ? run(['-p', String(opts.pp), '-n', '0'])[0] : null
const tg = Number(opts.tg) > 0 ? run(['-p', '0', '-n', String(opts.tg)])[0] : null
const any = pp ?? tg
console.log(JSON.stringify({
  engine: 'llama.cpp native', build: `${any.build_commit} (${any.build_number})`, cpu: any.cpu_info,
  threads: any.n_threads, flash_attn: any.flash_attn, n_ubatch: any.n_ubatch, type_k: any.type_k,
  pp: Number(opts.pp), tg: Number(opts.tg), reps: Number(opts.reps),
  prefill_tps: pp ? pp.avg_ts : 0, decode_tps: tg ? tg.avg_ts : 0,
  prefill_runs: pp ? pp.samples_ts : [], decode_runs: tg ? tg.samples_ts : [],
}))
