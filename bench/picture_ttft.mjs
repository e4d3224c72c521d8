#!/usr/bin/env node
// A cold picture turn through a server: starts `pinhole serve` or the native
// `llama-server`, then asks REPS times for one token about a picture that
// neither has seen (a new variant of make_picture.mjs's picture each time),
// and times each request from sending to the answer: the picture's encode,
// the prefill of its rows and the text around them, one decoded token and the
// HTTP round trip. Prints one JSON line.
//
//   node bench/picture_ttft.mjs --engine pinhole|llama --bin PATH --model LLM.gguf --mmproj MMPROJ.gguf
//        [--size 1024x768] [--reps 3] [--threads 2] [--first-variant 100]
//
// --bin is the pinhole binary, or the llama.cpp bin folder (llama-server is run
// from it with LD_LIBRARY_PATH set). Both servers get the same context (8192),
// thread count and the same chat request; a text-only request first (untimed)
// makes sure the model is loaded.
import { spawn } from 'node:child_process'
import fs from 'node:fs'
import net from 'node:net'
import os from 'node:os'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import { execFileSync } from 'node:child_process'

const opts = { engine: null, bin: null, model: null, mmproj: null, size: '1024x768', reps: 3, threads: 2,
               'first-variant': 100 }
const argv = process.argv.slice(2)
for (let i = 0; i < argv.length; i += 2) opts[argv[i].replace(/^--/, '')] = argv[i + 1]
if (!['pinhole', 'llama'].includes(opts.engine) || !opts.bin || !opts.model || !opts.mmproj) {
  process.stderr.write('usage: node bench/picture_ttft.mjs --engine pinhole|llama --bin PATH --model LLM.gguf ' +
                       '--mmproj MMPROJ.gguf [--size WxH] [--reps N] [--threads N]\n')
  process.exit(2)
}
const here = path.dirname(fileURLToPath(import.meta.url))
const [w, h] = opts.size.split('x').map(Number)

const freePort = () => new Promise((resolve, reject) => {
  const s = net.createServer()
  s.listen(0, '127.0.0.1', () => { const p = s.address().port; s.close(() => resolve(p)) })
  s.on('error', reject)
})

const port = await freePort()
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'pinhole-ttft-'))
const common = ['--host', '127.0.0.1', '--port', String(port), '-m', opts.model, '--mmproj', opts.mmproj,
                '-c', '8192', '-t', String(opts.threads)]
const child = opts.engine === 'pinhole'
  ? spawn(opts.bin, ['serve', ...common, '--temp', '0', '--any-model'], { stdio: ['ignore', 'ignore', 'pipe'] })
  : spawn(path.join(opts.bin, 'llama-server'), [...common, '-fa', 'on', '--no-webui', '--temp', '0'],
          { stdio: ['ignore', 'ignore', 'pipe'], env: { ...process.env, LD_LIBRARY_PATH: opts.bin } })
let log = ''
child.stderr.on('data', (d) => { log = (log + d).slice(-20000) })
const done = () => { try { child.kill('SIGTERM') } catch {} fs.rmSync(tmp, { recursive: true, force: true }) }
process.on('exit', done)

const base = `http://127.0.0.1:${port}`
for (let t = 0; ; t++) {
  if (child.exitCode !== null) { process.stderr.write(log); throw new Error(`${opts.engine} server exited`) }
  try { if ((await fetch(`${base}/health`)).ok) break } catch {}
  if (t > 1200) throw new Error('the server did not come up in 120 s')
  await new Promise((r) => setTimeout(r, 100))
}

// Streamed (the time to the end of a one-token stream is the time to the
// first token). llama-server's answer parser rejects some random-weight
// outputs under Qwen3.5's template ("does not match the expected
// peg-native format"): a 500 when not streamed, an error event at the end
// of a stream, after the token was made; such a sample counts, marked.
const ask = async (content) => {
  const t0 = performance.now()
  const r = await fetch(`${base}/v1/chat/completions`, {
    method: 'POST', headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'any', messages: [{ role: 'user', content }], max_tokens: 1, temperature: 0,
                           stream: true, stream_options: { include_usage: true } }),
  })
  const text = await r.text()
  const ms = performance.now() - t0
  if (!r.ok) throw new Error(`${opts.engine}: HTTP ${r.status}: ${text}`)
  const body = {}
  for (const line of text.split('\n')) {
    if (!line.startsWith('data: {')) continue
    const j = JSON.parse(line.slice(6))
    if (j.error) body.error = j.error.message
    if (j.usage) body.usage = j.usage
    if (j.timings) body.timings = j.timings
  }
  return { ms, body }
}

await ask('Hello') // untimed: loads what loads lazily
const samples = []
for (let i = 0; i < Number(opts.reps); i++) {
  const pic = path.join(tmp, `p${i}.png`)
  execFileSync('node', [path.join(here, 'make_picture.mjs'), String(w), String(h), pic,
                        String(Number(opts['first-variant']) + i)])
  const url = `data:image/png;base64,${fs.readFileSync(pic).toString('base64')}`
  const { ms, body } = await ask([{ type: 'image_url', image_url: { url } },
                                  { type: 'text', text: 'Describe the picture.' }])
  samples.push({ ms: Math.round(ms), prompt_tokens: body.usage?.prompt_tokens ?? null,
                 server_prompt_ms: body.timings?.prompt_ms ?? null, ...(body.error ? { error: body.error } : {}) })
}
const sorted = samples.map((s) => s.ms).sort((a, b) => a - b)
const median = sorted.length % 2 ? sorted[(sorted.length - 1) / 2]
                                 : (sorted[sorted.length / 2 - 1] + sorted[sorted.length / 2]) / 2
console.log(JSON.stringify({ engine: opts.engine, size: opts.size, threads: Number(opts.threads),
                             median_ms: median, samples }))
done()
process.exit(0)
