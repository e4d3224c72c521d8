#!/usr/bin/env node
// llama.cpp side of the pinhole benchmark, through @fugood/llama.node (CPU build).
//
//   node bench/llama_bench.mjs MODEL.gguf [--pp 512] [--tg 128] [--reps 3] [--threads 2]
//                              [--flash-attn auto|on|off]
//
// Prints one JSON line with prefill_tps and decode_tps (median of --reps runs),
// measured the same way as `pinhole bench`:
//   prefill: PP tokens in one batch into an empty KV cache (logits for the last one only);
//   decode:  TG tokens one llama_decode() each, starting from an (almost) empty KV cache.
//
// It uses llama.node's context.bench(pp, tg, pl, nr), which runs llama.cpp's own
// batched-bench loop in C++ (no JS in the timed region). One bench() call with
// pp=PP measures prefill into an empty cache, but its tg phase decodes *after*
// those PP tokens, i.e. with PP tokens in the cache; pinhole decodes from an empty
// cache. So each repetition makes two calls:
//   bench(PP, 1, 1, 1)  -> speedPp  (prefill of PP tokens from an empty cache)
//   bench(1, TG, 1, 1)  -> speedTg  (TG single-token decodes at positions 1..TG)
// and the median over repetitions is reported, as pinhole does (bench() itself
// would average nr runs). See bench/README.md for the details of bench().
import { createRequire } from 'node:module'
import { spawn } from 'node:child_process'
import { fileURLToPath } from 'node:url'
import path from 'node:path'
import fs from 'node:fs'

const require = createRequire(import.meta.url)

function usage(code) {
  const s = 'usage: node bench/llama_bench.mjs MODEL.gguf [--pp 512] [--tg 128] [--reps 3] [--threads 2] [--flash-attn auto|on|off]\n'
  process.stderr.write(s)
  process.exit(code)
}

const opts = { pp: 512, tg: 128, reps: 3, threads: 2, flashAttn: 'auto', model: null }
const argv = process.argv.slice(2)
for (let i = 0; i < argv.length; i++) {
  const a = argv[i]
  const num = (name) => {
    const v = Number(argv[++i])
    if (!Number.isInteger(v) || v < 1) {
      process.stderr.write(`llama_bench: ${name} needs a positive integer\n`)
      process.exit(2)
    }
    return v
  }
  if (a === '-h' || a === '--help') usage(0)
  else if (a === '--pp' || a === '-p') opts.pp = num(a)
  else if (a === '--tg' || a === '-n') opts.tg = num(a)
  else if (a === '--reps' || a === '-r') opts.reps = num(a)
  else if (a === '--threads' || a === '-t') opts.threads = num(a)
  else if (a === '--flash-attn') opts.flashAttn = argv[++i]
  else if (a.startsWith('-')) {
    process.stderr.write(`llama_bench: unknown option '${a}'\n`)
    usage(2)
  } else if (!opts.model) opts.model = a
  else usage(2)
}
if (!opts.model) usage(2)
if (!fs.existsSync(opts.model)) {
  process.stderr.write(`llama_bench: no such file: ${opts.model}\n`)
  process.exit(1)
}
if (!['auto', 'on', 'off'].includes(opts.flashAttn)) usage(2)

// llama.node's native code logs to stdout. To keep stdout to the one JSON line, the
// work runs in a child process whose stdout goes to our stderr; the child hands the
// result back on file descriptor 3.
if (!process.env.PINHOLE_LLAMA_BENCH_CHILD) {
  const child = spawn(process.execPath, [fileURLToPath(import.meta.url), ...process.argv.slice(2)], {
    stdio: ['ignore', 2, 2, 'pipe'],
    env: { ...process.env, PINHOLE_LLAMA_BENCH_CHILD: '1' },
  })
  let result = ''
  child.stdio[3].on('data', (d) => (result += d))
  const code = await new Promise((resolve) => child.on('close', (c, sig) => resolve(sig ? 128 : c)))
  if (code === 0 && result) process.stdout.write(result)
  process.exit(code === 0 && !result ? 1 : code)
}
const emit = (s) => fs.writeSync(3, s)

const { loadModel, getBackendDevicesInfo, BuildInfo } = await import('@fugood/llama.node')
const pkgVersion = require('@fugood/llama.node/package.json').version

const median = (v) => {
  const s = [...v].sort((x, y) => x - y)
  const n = s.length
  return n % 2 ? s[(n - 1) / 2] : 0.5 * (s[n / 2 - 1] + s[n / 2])
}
const log = (s) => process.stderr.write(`llama_bench: ${s}\n`)

// Only the CPU package (@fugood/node-llama-linux-x64) is installed, so ggml has
// no GPU backend to pick; n_gpu_layers=0 and devices=['CPU'] make that explicit.
const devices = await getBackendDevicesInfo()
const gpus = devices.filter((d) => !/^cpu$/i.test(d.type ?? '') && !/^CPU$/.test(d.deviceName ?? ''))
if (gpus.length) log(`warning: non-CPU backend devices present (not used): ${JSON.stringify(gpus)}`)

const nCtx = Math.max(opts.pp, opts.tg) + 1
const ctx = await loadModel({
  model: path.resolve(opts.model),
  n_ctx: nCtx,
  n_batch: Math.max(opts.pp, 512),
  n_ubatch: Math.max(opts.pp, 512), // prefill is one ubatch, like pinhole's single eval call
  n_threads: opts.threads, // n_threads_batch follows n_threads
  n_gpu_layers: 0,
  devices: ['CPU'],
  flash_attn_type: opts.flashAttn,
  use_mmap: true,
})

const systemInfo = ctx.getSystemInfo()
const pp = []
const tg = []
let info = null
try {
  for (let r = 0; r < opts.reps; r++) {
    const a = await ctx.bench(opts.pp, 1, 1, 1)
    const b = await ctx.bench(1, opts.tg, 1, 1)
    if (a.speedPp === undefined || b.speedTg === undefined) throw new Error('bench() failed (see native log)')
    if (a.nThreads !== opts.threads || a.nThreadsBatch !== opts.threads)
      throw new Error(`llama.cpp runs ${a.nThreads}/${a.nThreadsBatch} threads, wanted ${opts.threads}`)
    if (a.nGpuLayers > 0) throw new Error(`n_gpu_layers=${a.nGpuLayers}`)
    info = a
    pp.push(a.speedPp)
    tg.push(b.speedTg)
    log(`run ${r + 1}: prefill ${a.speedPp.toFixed(2)} tok/s, decode ${b.speedTg.toFixed(2)} tok/s`)
  }
} finally {
  await ctx.release()
}

const out = {
  engine: 'llama.cpp',
  llama_node: pkgVersion,
  llama_cpp_build: `${BuildInfo.number} (${BuildInfo.commit})`,
  model: path.basename(opts.model),
  threads: info.nThreads,
  threads_batch: info.nThreadsBatch,
  flash_attn: opts.flashAttn,
  n_ubatch: info.nUBatch,
  pp: opts.pp,
  tg: opts.tg,
  reps: opts.reps,
  prefill_tps: Number(median(pp).toFixed(3)),
  decode_tps: Number(median(tg).toFixed(3)),
  prefill_runs: pp.map((x) => Number(x.toFixed(3))),
  decode_runs: tg.map((x) => Number(x.toFixed(3))),
  system_info: systemInfo,
}
emit(JSON.stringify(out) + '\n')
