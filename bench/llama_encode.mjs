#!/usr/bin/env node
// llama.cpp side of the picture benchmark, through @fugood/llama.node (CPU).
//   node bench/llama_encode.mjs LLM.gguf MMPROJ.gguf PICTURE [--threads 2]
// Prints one JSON line: prompt_ms (time for the whole prompt: the picture's
// encoding plus the prefill of its rows and the text around it) and the
// number of prompt tokens, from llama.cpp's own timings.
import { createRequire } from 'node:module'

const require = createRequire(import.meta.url)
const { loadModel } = require('@fugood/llama.node')

const args = process.argv.slice(2)
let threads = 2
const ti = args.indexOf('--threads')
if (ti >= 0) threads = Number(args.splice(ti, 2)[1])
const [model, mmproj, picture] = args
if (!picture) {
  process.stderr.write('usage: node bench/llama_encode.mjs LLM.gguf MMPROJ.gguf PICTURE [--threads 2]\n')
  process.exit(2)
}
const ctx = await loadModel({ model, n_ctx: 8192, n_batch: 2048, n_ubatch: 512, n_threads: threads,
                              n_gpu_layers: 0, devices: ['CPU'] })
await ctx.initMultimodal({ path: mmproj, use_gpu: false })
const prompt = '<|im_start|>user\n<__media__>Describe the picture.<|im_end|>\n<|im_start|>assistant\n'
const t0 = process.hrtime.bigint()
const r = await ctx.completion({ prompt, media_paths: [picture], n_predict: 1, temperature: 0 })
const wall_ms = Number(process.hrtime.bigint() - t0) / 1e6
await ctx.release()
process.stdout.write(JSON.stringify({ engine: 'llama.cpp', picture, prompt_ms: r.timings.prompt_ms,
                                      prompt_n: r.timings.prompt_n, wall_ms }) + '\n')
