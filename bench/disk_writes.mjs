#!/usr/bin/env node
// Write amplification of the disk tier (docs/state-cache.md, Disk tier):
// how many bytes `pinhole serve --kv-disk-dir` writes to keep a conversation
// on disk, turn by turn, against what it keeps at the end. Bytes, not
// seconds: the numbers do not depend on the machine's load. Plain fetch and
// node's own modules, no dependencies. Not part of CI.
//
//   node bench/disk_writes.mjs --pinhole BIN --model LLM.gguf --mmproj MMPROJ.gguf
//       [--picture PNG] [--parts chat,agent] [--turns 20] [--ctx 8192]
//       [--agent-tokens 30000] [--agent-ctx 32768] [--threads 2] [--max-tokens 8]
//       [--row-bytes N]  (the KV bytes of a row: read from the model's metadata otherwise)
//
// Parts:
//  chat   a picture chat of --turns turns: turn 1 a picture and a question,
//         then a short question a turn (the answers sent back as history).
//  agent  a text agent history: a long system prompt (~12k tokens of tool
//         descriptions), then turns that each send back a tool result of
//         ~1.5k tokens, until the history holds --agent-tokens tokens.
// After each turn the script waits for the checkpoint writes
// (pinhole_disk_cache_writes_queued 0) and prints one JSON line: the turn,
// the prompt's tokens, the bytes written by the turn and in all, the bytes
// the folder keeps (pinhole_disk_cache_bytes). The last line of a part is its
// summary: the conversation's KV at the end (its rows times the KV bytes of a
// row, from the GGUF file's metadata: a Qwen3-VL model's layers, KV heads
// and head size, f16 K and V) and the write amplification, the bytes
// written in all over that.
import { spawn } from 'node:child_process'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'

const sleep = (ms) => new Promise((r) => setTimeout(r, ms))
const args = Object.fromEntries(
  process.argv.slice(2).reduce((a, v, i, all) => (v.startsWith('--') ? [...a, [v.slice(2), all[i + 1]]] : a), []))
const o = {
  pinhole: args.pinhole || 'build/pinhole', model: args.model, mmproj: args.mmproj, picture: args.picture,
  parts: (args.parts || 'chat,agent').split(','), turns: Number(args.turns || 20), ctx: Number(args.ctx || 8192),
  agentTokens: Number(args['agent-tokens'] || 30000), agentCtx: Number(args['agent-ctx'] || 32768),
  threads: Number(args.threads || 2), maxTokens: Number(args['max-tokens'] || 8),
}
if (!o.model || (o.parts.includes('chat') && (!o.mmproj || !o.picture))) {
  process.stderr.write('usage: node bench/disk_writes.mjs --pinhole BIN --model LLM.gguf --mmproj MMPROJ.gguf ' +
                       '--picture PNG [--parts chat,agent] [--turns 20] ...\n')
  process.exit(2)
}

// The KV bytes of one row: K and V cells of every layer, f16 (a Qwen3-VL
// file: every layer has attention). Reads the GGUF header's key-value pairs.
function rowBytes(file) {
  const fd = fs.openSync(file, 'r'), b = Buffer.alloc(16 << 20) // the metadata (a vocabulary is a few MiB)
  fs.readSync(fd, b, 0, b.length, 0)
  fs.closeSync(fd)
  let at = 16
  const n = Number(b.readBigUInt64LE(at)); at += 8
  const str = () => { const l = Number(b.readBigUInt64LE(at)); at += 8; at += l; return b.toString('utf8', at - l, at) }
  const SIZES = { 0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8 }
  const val = (t) => {
    if (t === 8) return str()
    if (t === 9) { const et = b.readUInt32LE(at); at += 4; const c = Number(b.readBigUInt64LE(at)); at += 8
                   for (let i = 0; i < c; i++) val(et); return null }
    const v = t === 4 ? b.readUInt32LE(at) : t === 5 ? b.readInt32LE(at) : null
    at += SIZES[t]; return v
  }
  const kv = {}
  for (let i = 0; i < n; i++) { const k = str(); const t = b.readUInt32LE(at); at += 4; kv[k] = val(t) }
  const a = kv['general.architecture'], get = (k) => kv[`${a}.${k}`]
  const hd = get('attention.key_length') ?? get('embedding_length') / get('attention.head_count')
  return 2 * get('block_count') * get('attention.head_count_kv') * hd * 2
}
const ROW_BYTES = Number(args['row-bytes']) || rowBytes(o.model)

async function start(ctx, dir) {
  const argv = ['serve', '-m', o.model, '--port', '0', '-t', String(o.threads), '-c', String(ctx), '--kv-disk-dir', dir]
  if (o.mmproj) argv.push('--mmproj', o.mmproj)
  const proc = spawn(o.pinhole, argv, { stdio: ['ignore', 'pipe', 'pipe'] })
  let log = ''
  proc.stdout.setEncoding('utf8'); proc.stderr.setEncoding('utf8')
  proc.stdout.on('data', (d) => { log += d }); proc.stderr.on('data', (d) => { log += d })
  let exited = null
  proc.on('exit', (code, signal) => { exited = { code, signal } })
  process.on('exit', () => { if (!exited) proc.kill('SIGKILL') })
  const t0 = Date.now()
  for (;;) {
    const m = /listening on (http:\/\/[^\s]+)/.exec(log)
    if (m) return { url: m[1].replace(/\/$/, ''), stop: () => new Promise((r) => { proc.on('exit', r); proc.kill('SIGTERM') }) }
    if (exited) throw new Error(`pinhole serve exited (${JSON.stringify(exited)}):\n${log}`)
    if (Date.now() - t0 > 300_000) throw new Error('pinhole serve: no "listening" line in 300 s')
    await sleep(100)
  }
}

async function metrics(url) {
  const m = {}
  for (const line of (await (await fetch(`${url}/metrics`)).text()).split('\n')) {
    const x = /^pinhole_([a-z_]+) (\S+)$/.exec(line)
    if (x) m[x[1]] = Number(x[2])
  }
  return m
}
async function settled(url) {
  for (let t0 = Date.now(); ; await sleep(100)) {
    const m = await metrics(url)
    if (m.disk_cache_writes_queued === 0) return m
    if (Date.now() - t0 > 600_000) throw new Error('checkpoint writes still queued after 600 s')
  }
}
async function turn(url, messages) {
  const res = await fetch(`${url}/v1/chat/completions`, {
    method: 'POST', headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ messages, max_tokens: o.maxTokens, temperature: 0 }),
  })
  if (!res.ok) throw new Error(`HTTP ${res.status}: ${await res.text()}`)
  const j = await res.json()
  return { text: j.choices[0].message.content ?? '', usage: j.usage }
}

// Words that the Qwen2 vocabulary takes as about one token each.
const WORDS = 'file read write edit search list run test build path line code error value name type call result ' +
              'tool input output status branch commit diff patch module function return string number object'
const words = WORDS.split(' ')
const text = (n, seed) => Array.from({ length: n }, (_, i) => words[(i * 7 + seed * 13 + (i >> 3)) % words.length]).join(' ')

async function part(name, ctx, first, next, done) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), `pinhole-writes-${name}-`))
  const s = await start(ctx, dir)
  const messages = [...first]
  let before = await settled(s.url), rows = 0
  for (let t = 1; !done(t, rows); t++) {
    if (t > 1) messages.push(next(t))
    const r = await turn(s.url, messages)
    messages.push({ role: 'assistant', content: r.text })
    rows = r.usage.prompt_tokens + r.usage.completion_tokens
    const m = await settled(s.url)
    console.log(JSON.stringify({ part: name, turn: t, prompt_tokens: r.usage.prompt_tokens, rows,
      written: m.disk_cache_written_bytes_total - before.disk_cache_written_bytes_total,
      written_total: m.disk_cache_written_bytes_total, kept: m.disk_cache_bytes }))
    before = m
  }
  const m = await metrics(s.url)
  const kv = rows * ROW_BYTES
  console.log(JSON.stringify({ part: name, summary: true, rows, row_bytes: ROW_BYTES, final_kv: kv,
    written_total: m.disk_cache_written_bytes_total, kept: m.disk_cache_bytes,
    amplification: +(m.disk_cache_written_bytes_total / kv).toFixed(3) }))
  await s.stop()
  fs.rmSync(dir, { recursive: true, force: true })
}

if (o.parts.includes('chat')) {
  const png = fs.readFileSync(o.picture).toString('base64')
  await part('chat', o.ctx,
    [{ role: 'user', content: [{ type: 'image_url', image_url: { url: `data:image/png;base64,${png}` } },
                               { type: 'text', text: 'What is in this picture?' }] }],
    (t) => ({ role: 'user', content: `Question ${t}: ${text(24, t)}?` }),
    (t) => t > o.turns)
}
if (o.parts.includes('agent')) {
  await part('agent', o.agentCtx,
    [{ role: 'system', content: `You are a coding agent. Tools:\n${text(12000, 1)}` },
     { role: 'user', content: 'Fix the failing test.' }],
    (t) => ({ role: 'user', content: `Tool result ${t}:\n${text(1500, t)}` }),
    (t, rows) => rows + 1600 > o.agentTokens || rows + 1600 > o.agentCtx)
}
