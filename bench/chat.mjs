#!/usr/bin/env node
// Multi-turn picture chat benchmark: time to first token of each turn when a
// client re-sends the whole conversation (pictures included) every turn.
//   node bench/chat.mjs pinhole URL PIC_A PIC_B SEQUENCE          (pinhole serve at URL)
//   node bench/chat.mjs llama-server URL PIC_A PIC_B SEQUENCE     (the native llama-server at URL)
//   node bench/chat.mjs llama LLM.gguf MMPROJ.gguf PIC_A PIC_B SEQUENCE [--threads 2]   (llama.node, no AVX)
// SEQUENCE: "resend" (one picture re-sent on 4 turns: A1 A2 A3 A4) or
// "interleaved" (two conversations with different pictures: A1 B1 A2 B2).
// Prints one JSON line per turn. Both engines see the same prompts: the
// assistant turns in the history are fixed texts, not the model's answers.
import fs from 'node:fs'
import { createRequire } from 'node:module'

const QUESTIONS = ['Describe the picture.', 'What colours are in it?', 'Is there any text?', 'Summarize in one line.']
const ANSWER = 'It shows a synthetic test pattern.'
const N_PREDICT = 8

function turns(sequence) {
  if (sequence === 'resend') return [['A', 1], ['A', 2], ['A', 3], ['A', 4]]
  if (sequence === 'interleaved') return [['A', 1], ['B', 1], ['A', 2], ['B', 2]]
  throw new Error(`unknown sequence ${sequence}`)
}

// The conversation of turn k (1-based) about picture `pic`.
function conversation(k) {
  const msgs = [{ role: 'user', pic: true, text: QUESTIONS[0] }]
  for (let i = 1; i < k; i++) msgs.push({ role: 'assistant', text: ANSWER }, { role: 'user', text: QUESTIONS[i] })
  return msgs
}

async function metrics(url) {
  const t = await (await fetch(`${url}/metrics`)).text()
  const get = (n) => Number((t.match(new RegExp(`^${n} (\\S+)`, 'm')) || [0, 0])[1])
  return { reused: get('pinhole_prompt_tokens_reused_total'), prefilled: get('pinhole_prompt_tokens_prefilled_total'),
           from_ram: get('pinhole_ram_cache_tokens_restored_total'),
           encoded: get('pinhole_images_encoded_total'), cache_hits: get('pinhole_image_cache_hits_total'),
           kv_copied: get('pinhole_kv_bytes_copied_total') }
}

// An OpenAI-compatible server: pinhole (its /metrics deltas are added) or llama-server.
async function runServer(engine, url, pics, sequence) {
  const pinhole = engine === 'pinhole'
  const none = async () => ({})
  for (const [which, k] of turns(sequence)) {
    const uri = `data:image/png;base64,${fs.readFileSync(pics[which]).toString('base64')}`
    const messages = conversation(k).map((m) => m.pic
      ? { role: m.role, content: [{ type: 'image_url', image_url: { url: uri } }, { type: 'text', text: m.text }] }
      : { role: m.role, content: m.text })
    const before = await (pinhole ? metrics(url) : none())
    const t0 = performance.now()
    const res = await fetch(`${url}/v1/chat/completions`, {
      method: 'POST', headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'any', messages, max_tokens: N_PREDICT, temperature: 0, stream: true }),
    })
    let ttft = null
    const dec = new TextDecoder()
    for await (const chunk of res.body) {
      // the first token of the answer, reasoning (a thinking model's, Qwen3.5) or content
      if (ttft === null && /"(reasoning_)?content":"[^"]/.test(dec.decode(chunk))) ttft = performance.now() - t0
    }
    const total = performance.now() - t0
    const after = await (pinhole ? metrics(url) : none())
    const d = Object.fromEntries(Object.keys(after).map((key) => [key, after[key] - before[key]]))
    process.stdout.write(JSON.stringify({ engine, sequence, turn: `${which}${k}`,
                                          ttft_s: (ttft ?? total) / 1000, total_s: total / 1000, ...d }) + '\n')
  }
}

async function runLlama(model, mmproj, pics, sequence, threads) {
  const require = createRequire(import.meta.url)
  const { loadModel } = require('@fugood/llama.node')
  const ctx = await loadModel({ model, n_ctx: 8192, n_batch: 2048, n_ubatch: 512, n_threads: threads,
                                n_gpu_layers: 0, devices: ['CPU'] })
  await ctx.initMultimodal({ path: mmproj, use_gpu: false })
  for (const [which, k] of turns(sequence)) {
    let prompt = ''
    for (const m of conversation(k))
      prompt += `<|im_start|>${m.role}\n${m.pic ? '<__media__>' : ''}${m.text}<|im_end|>\n`
    prompt += '<|im_start|>assistant\n'
    const t0 = performance.now()
    const r = await ctx.completion({ prompt, media_paths: [pics[which]], n_predict: N_PREDICT, temperature: 0 })
    const total = performance.now() - t0
    // Time to first token: the call's wall time less the evaluation of the
    // tokens after the first (llama.cpp's predicted_ms). Its prompt_ms is no
    // measure of it: its clock starts at the first llama_decode, which comes
    // after the picture is encoded when the text before the picture is reused.
    process.stdout.write(JSON.stringify({ engine: 'llama.cpp', sequence, turn: `${which}${k}`,
                                          ttft_s: (total - r.timings.predicted_ms) / 1000, total_s: total / 1000,
                                          prompt_ms: r.timings.prompt_ms, predicted_ms: r.timings.predicted_ms,
                                          prompt_n: r.timings.prompt_n }) + '\n')
  }
  await ctx.release()
}

const args = process.argv.slice(2)
let threads = 2
const ti = args.indexOf('--threads')
if (ti >= 0) threads = Number(args.splice(ti, 2)[1])
if ((args[0] === 'pinhole' || args[0] === 'llama-server') && args.length === 5) {
  await runServer(args[0], args[1], { A: args[2], B: args[3] }, args[4])
} else if (args[0] === 'llama' && args.length === 6) {
  await runLlama(args[1], args[2], { A: args[3], B: args[4] }, args[5], threads)
} else {
  process.stderr.write('usage: node bench/chat.mjs pinhole|llama-server URL PIC_A PIC_B SEQUENCE\n' +
                       '       node bench/chat.mjs llama LLM MMPROJ PIC_A PIC_B SEQUENCE [--threads N]\n')
  process.exit(2)
}
