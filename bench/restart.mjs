#!/usr/bin/env node
// Restart benchmark of the disk tier (src/state/disk_tier.h): how fast a
// conversation resumes after the server restarts. Driven by bench/restart.sh;
// plain fetch and node's own modules, no dependencies.
//
//   node bench/restart.mjs run  [options]      runs the parts, one JSON line per measurement on stdout
//   node bench/restart.mjs table FILE.jsonl...  renders lines as the tables of bench/RESULTS.md
//   node bench/restart.mjs quiet [WHAT]          waits for a quiet machine (as before each measurement)
//
// run options: --pinhole BIN --llama-server BIN --model LLM.gguf --mmproj MMPROJ.gguf
//   --picture PNG --tmp DIR [--threads 2] [--ctx 8192] [--parts "A BC D"]
//   [--sizes 1024,2048,4096,8192] [--d-ctx 16384] [--reps 1] [--max-tokens 8]
//   [--engines pinhole,llama] [--page-cache warm,cold,warmup]  the states of each resumed turn: warm (the files just
//   written, in the page cache), cold (their pages dropped first: dd iflag=nocache count=0),
//   warmup (pinhole only: warm, and one short unrelated request before the measured turn,
//   as llama-server runs a warm-up pass at start)
//
// Parts (the engines run one at a time, never together):
//  A  pinhole serve --kv-disk-dir: a picture chat, turns 1 and 2; wait for the
//     checkpoint writes; SIGTERM; a new server on the same folder; turn 3.
//  BC llama-server (native llama.cpp), -np 1 --slot-save-path: turns 1 and 2,
//     POST /slots/0?action=save; stopped; B: a new server (no slot path), turn 3
//     recomputed (picture encoded again, history read again); stopped;
//     C: a new server, POST /slots/0?action=restore, then turn 3.
//     If the save is refused, the error is recorded and part T (text) runs.
//  T  the same for a text-only conversation of ~800 tokens (pinhole from disk,
//     llama-server slot restore), only when C could not save the picture chat.
//  D  text-only conversations of about each --sizes tokens: turn 1, restart,
//     turn 2; pinhole (read seconds from /metrics, TTFT) and llama-server (slot
//     restore time, TTFT), alternating per size.
// A turn's TTFT is measured by this client: from sending the request (stream:
// true) to the first SSE chunk carrying a non-empty content or
// reasoning_content delta.
import { execFileSync, spawn } from 'node:child_process'
import fs from 'node:fs'
import net from 'node:net'
import os from 'node:os'
import path from 'node:path'

const sleep = (ms) => new Promise((r) => setTimeout(r, ms))
const emit = (o) => process.stdout.write(JSON.stringify(o) + '\n')
const log = (s) => process.stderr.write(`restart.mjs: ${s}\n`)
const round = (x, d = 4) => (x == null ? x : Math.round(x * 10 ** d) / 10 ** d)

// ---- the machine: wait until nothing heavy runs --------------------------
function cpuTimes() {
  const f = fs.readFileSync('/proc/stat', 'utf8').split('\n')[0].trim().split(/\s+/).slice(1).map(Number)
  const idle = f[3] + (f[4] || 0)
  return { idle, total: f.reduce((a, b) => a + b, 0) }
}
async function busyFraction(ms = 2000) {
  const a = cpuTimes()
  await sleep(ms)
  const b = cpuTimes()
  return 1 - (b.idle - a.idle) / Math.max(1, b.total - a.total)
}
function heavyProcs() {
  try {
    return execFileSync('pgrep', ['-af', 'cc1|ctest|test_engine|node --test'], { encoding: 'utf8' }).trim()
  } catch { return '' }
}
// Before each measurement: no compiler or test running and the CPUs (nearly)
// idle over 2 s. Waits at most maxS, then goes on and says so.
async function waitQuiet(what, maxS = 900) {
  const t0 = Date.now()
  let said = false
  for (;;) {
    const heavy = heavyProcs()
    const busy = heavy ? 1 : await busyFraction()
    if (!heavy && busy < 0.25) {
      const waited = (Date.now() - t0) / 1000
      if (said) log(`${what}: quiet after ${waited.toFixed(0)} s`)
      return { load1: Number(os.loadavg()[0].toFixed(2)), busy: round(busy, 2), waited_s: round(waited, 1) }
    }
    if (!said) { log(`${what}: waiting for a quiet machine (${heavy ? heavy.split('\n')[0] : `cpu ${(busy * 100).toFixed(0)}% busy`})`); said = true }
    if ((Date.now() - t0) / 1000 > maxS) {
      log(`${what}: still busy after ${maxS} s, going on`)
      return { load1: Number(os.loadavg()[0].toFixed(2)), busy: round(busy, 2), waited_s: maxS, not_quiet: true }
    }
    await sleep(3000)
  }
}

// ---- servers ---------------------------------------------------------------
function freePort() {
  return new Promise((resolve, reject) => {
    const s = net.createServer()
    s.on('error', reject)
    s.listen(0, '127.0.0.1', () => { const p = s.address().port; s.close(() => resolve(p)) })
  })
}

// Starts a server process; its stderr (and stdout) go to logFile and are kept.
function startProc(bin, args, logFile) {
  const proc = spawn(bin, args, { stdio: ['ignore', 'pipe', 'pipe'] })
  const out = fs.createWriteStream(logFile)
  let text = ''
  const take = (d) => { text += d; out.write(d) }
  proc.stdout.setEncoding('utf8'); proc.stderr.setEncoding('utf8')
  proc.stdout.on('data', take); proc.stderr.on('data', take)
  let exit = null
  const exited = new Promise((resolve) => proc.on('exit', (code, signal) => { exit = { code, signal }; out.end(); resolve(exit) }))
  return {
    proc, cmd: [bin, ...args].join(' '),
    get log() { return text },
    get exit() { return exit },
    async stop(signal = 'SIGTERM', timeoutMs = 120_000) {
      if (exit) return exit
      const t0 = performance.now()
      proc.kill(signal)
      let timer
      const r = await Promise.race([exited, new Promise((res) => { timer = setTimeout(res, timeoutMs, null) })])
      clearTimeout(timer) // a pending timer would keep node alive after the last run
      if (!r) { proc.kill('SIGKILL'); await exited; throw new Error(`${bin} did not stop within ${timeoutMs / 1000} s of ${signal}`) }
      return { ...r, stop_s: round((performance.now() - t0) / 1000, 3) }
    },
  }
}
const live = new Set()
process.on('exit', () => { for (const s of live) if (!s.exit) s.proc.kill('SIGKILL') })

async function startPinhole(o, { ctx, kvDir, logFile }) {
  const args = ['serve', '-m', o.model, '--mmproj', o.mmproj, '--port', '0', '-t', String(o.threads), '-c', String(ctx),
                '--kv-disk-dir', kvDir]
  const t0 = performance.now()
  const s = startProc(o.pinhole, args, logFile)
  live.add(s)
  for (;;) {
    const m = /listening on (http:\/\/[^\s]+)/.exec(s.log)
    if (m) { s.url = m[1].replace(/\/$/, ''); break }
    if (s.exit) throw new Error(`${s.cmd} exited (${JSON.stringify(s.exit)}):\n${s.log}`)
    if (performance.now() - t0 > 300_000) throw new Error(`${s.cmd}: no "listening" line in 300 s`)
    await sleep(100)
  }
  s.start_s = round((performance.now() - t0) / 1000, 3)
  s.engine = 'pinhole'
  return s
}

async function startLlama(o, { ctx, slotDir, logFile }) {
  const port = await freePort()
  const args = ['-m', o.model, '--mmproj', o.mmproj, '-t', String(o.threads), '-c', String(ctx), '-np', '1',
                '--host', '127.0.0.1', '--port', String(port)]
  if (slotDir) args.push('--slot-save-path', slotDir.endsWith('/') ? slotDir : slotDir + '/')
  const t0 = performance.now()
  const s = startProc(o.llamaServer, args, logFile)
  live.add(s)
  s.url = `http://127.0.0.1:${port}`
  for (;;) {
    if (s.exit) throw new Error(`${s.cmd} exited (${JSON.stringify(s.exit)}):\n${s.log.slice(-4000)}`)
    try {
      const r = await fetch(`${s.url}/health`)
      if (r.status === 200) break
    } catch { /* not listening yet */ }
    if (performance.now() - t0 > 300_000) throw new Error(`${s.cmd}: not healthy in 300 s`)
    await sleep(200)
  }
  s.start_s = round((performance.now() - t0) / 1000, 3)
  s.engine = 'llama-server'
  return s
}

// ---- pinhole's /metrics -------------------------------------------------------
async function metrics(url) {
  const t = await (await fetch(`${url}/metrics`)).text()
  const m = {}
  for (const line of t.split('\n')) {
    const x = /^(pinhole_[a-z_]+) (\S+)$/.exec(line)
    if (x) m[x[1].replace(/^pinhole_/, '')] = Number(x[2])
  }
  return m
}
async function waitWrites(url, maxS = 600) {
  const t0 = performance.now()
  for (;;) {
    const m = await metrics(url)
    if (m.disk_cache_writes_queued === 0) return { metrics: m, waited_s: round((performance.now() - t0) / 1000, 3) }
    if (performance.now() - t0 > maxS * 1000) throw new Error(`checkpoint writes still queued after ${maxS} s`)
    await sleep(100)
  }
}
const DISK_KEYS = ['disk_cache_hits_total', 'disk_cache_misses_total', 'disk_cache_saves_total', 'disk_cache_skipped_total',
                   'disk_cache_evictions_total', 'disk_cache_rejected_total', 'disk_cache_tokens_restored_total',
                   'disk_cache_written_bytes_total', 'disk_cache_read_bytes_total', 'disk_cache_write_seconds_total',
                   'disk_cache_read_seconds_total', 'images_encoded_total', 'prompt_tokens_reused_total',
                   'prompt_tokens_prefilled_total']
const pick = (m) => Object.fromEntries(DISK_KEYS.map((k) => [k, m[k]]))
const diff = (a, b) => Object.fromEntries(DISK_KEYS.map((k) => [k, round((b[k] ?? 0) - (a[k] ?? 0), 6)]))

// ---- one streamed chat turn ---------------------------------------------------
async function turn(url, messages, maxTokens) {
  const t0 = performance.now()
  const res = await fetch(`${url}/v1/chat/completions`, {
    method: 'POST', headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ messages, max_tokens: maxTokens, temperature: 0, stream: true,
                           stream_options: { include_usage: true } }),
  })
  if (!res.ok) throw new Error(`${url}: HTTP ${res.status}: ${await res.text()}`)
  let ttft = null, firstChunk = null, usage = null, timings = null, text = '', buf = '', nDeltas = 0, streamError = null
  const dec = new TextDecoder()
  const onData = (d) => {
    if (d === '[DONE]') return
    const j = JSON.parse(d)
    const now = performance.now()
    // llama-server may end a stream with an error chunk when its chat-output
    // parser rejects the (random) text at the end; the deltas before it stand
    if (j.error) { streamError = j.error.message ?? JSON.stringify(j.error); return }
    if (firstChunk === null) firstChunk = now - t0
    const delta = j.choices?.[0]?.delta
    const piece = (delta?.content || '') + (delta?.reasoning_content || '')
    if (piece) { nDeltas++; text += piece; if (ttft === null) ttft = now - t0 }
    if (j.usage) usage = j.usage
    if (j.timings) timings = j.timings
  }
  for await (const chunk of res.body) {
    buf += dec.decode(chunk, { stream: true })
    let i
    while ((i = buf.indexOf('\n')) >= 0) {
      const line = buf.slice(0, i).replace(/\r$/, '')
      buf = buf.slice(i + 1)
      if (line.startsWith('data: ')) onData(line.slice(6))
    }
  }
  const total = performance.now() - t0
  return {
    ttft_s: round((ttft ?? total) / 1000), ttft_from: ttft === null ? 'end (no text delta)' : 'first text delta',
    first_chunk_s: round(firstChunk / 1000), total_s: round(total / 1000),
    prompt_tokens: usage?.prompt_tokens, cached_tokens: usage?.prompt_tokens_details?.cached_tokens,
    completion_tokens: usage?.completion_tokens, text_deltas: nDeltas, text: text.slice(0, 80),
    ...(streamError ? { stream_error: streamError } : {}),
    ...(timings ? { timings: { prompt_n: timings.prompt_n, prompt_ms: round(timings.prompt_ms, 1),
                               cache_n: timings.cache_n, predicted_n: timings.predicted_n,
                               predicted_ms: round(timings.predicted_ms, 1) } } : {}),
  }
}

async function slotAction(url, action, filename) {
  const t0 = performance.now()
  const r = await fetch(`${url}/slots/0?action=${action}`, {
    method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ filename }),
  })
  const body = await r.text()
  const wall = round((performance.now() - t0) / 1000)
  let json = null
  try { json = JSON.parse(body) } catch { /* keep the text */ }
  return { ok: r.ok, status: r.status, wall_s: wall, body: json ?? body }
}

// ---- conversations --------------------------------------------------------------
const SYSTEM = 'You are a careful assistant who describes pictures in detail.'
const Q = ['What is in this picture?', 'Which colours stand out, and where?', 'Is there any text or writing in it?']
const A = ['It shows a smooth colour gradient with a fine checked pattern over it.',
           'Red grows from left to right, green from top to bottom, and blue follows the pattern.']

// The picture chat of turn k (1..3); the assistant turns are fixed texts, not
// the model's answers, so that both engines read the same conversation.
function pictureChat(uri, k) {
  const msgs = [{ role: 'system', content: SYSTEM },
                { role: 'user', content: [{ type: 'text', text: 'Here is my photo:' },
                                          { type: 'image_url', image_url: { url: uri } },
                                          { type: 'text', text: Q[0] }] }]
  for (let i = 1; i < k; i++) msgs.push({ role: 'assistant', content: A[i - 1] }, { role: 'user', content: Q[i] })
  return msgs
}

// A deterministic text of about n tokens (short common words: about one token
// each with this tokenizer; the prompt_tokens of each turn say what it was).
const WORDS = ('the a of and to in is was for on that with as by at from it this be are or an which not have has ' +
               'but they one all were we when there can more so if out no up what about into than them only other ' +
               'time new some could these two may then do first any my now such like our over man me even most made ' +
               'after also did many before must through back years where much your way well down should because each ' +
               'just those people how too little state good very make world still own see men work long get here ' +
               'between both life being under never day same another know while last might us great old year off ' +
               'come since against go came right used take three').split(' ')
function notes(n, seed) {
  let x = seed * 2654435761 % 4294967296 || 1
  const rnd = () => { x ^= x << 13; x >>>= 0; x ^= x >>> 17; x ^= x << 5; x >>>= 0; return x }
  const out = []
  for (let i = 0; i < n; i++) {
    let w = WORDS[rnd() % WORDS.length]
    if (i % 12 === 0) w = w[0].toUpperCase() + w.slice(1)
    out.push(i % 12 === 11 ? w + '.' : w)
  }
  return out.join(' ')
}
// Text chat: turn 1 carries ~n tokens of notes; turn 2 adds an answer and a question.
function textChat(n, k) {
  const msgs = [{ role: 'system', content: 'You are a careful assistant who summarizes notes.' },
                { role: 'user', content: `Here are my notes:\n${notes(n, n)}\nWhat are they about?` }]
  if (k >= 2) msgs.push({ role: 'assistant', content: 'They are a list of common words in loose sentences.' },
                        { role: 'user', content: 'Which words come up most often?' })
  return msgs
}

const WARMUP = [{ role: 'user', content: 'Hello.' }]

const phkv = (dir) => fs.readdirSync(dir).filter((f) => f.endsWith('.phkv') && !f.startsWith('tmp.'))
  .map((f) => ({ name: f.slice(0, 12) + '...', bytes: fs.statSync(path.join(dir, f)).size }))
const logLines = (s, re) => s.log.split('\n').filter((l) => re.test(l)).map((l) => l.slice(0, 400))
const PH_LOG = /checkpoint|disk|restor|chat_completions|kernels|isa|avx/i
const LL_LOG = /slot (save|restore)|prompt eval time|restored|cache|image|encod|prompt processing|n_past|system_info/i

// ---- pinhole: turns before the restart, restart, the resumed turn ----------------
// Returns the lines of the resumed turn.
async function pinholeRestart(o, { part, ctx, before, after, tag, sizeTokens }) {
  const kv = path.join(o.tmp, `${tag}-kv`)
  fs.rmSync(kv, { recursive: true, force: true })
  fs.mkdirSync(kv, { recursive: true })
  const q0 = await waitQuiet(`${tag} pinhole`)
  let s = await startPinhole(o, { ctx, kvDir: kv, logFile: path.join(o.tmp, `${tag}-pinhole-1.log`) })
  const startLine = logLines(s, /listening|kernels|isa|model/i)
  const pre = []
  for (const [i, msgs] of before.entries()) {
    const m0 = await metrics(s.url)
    const t = await turn(s.url, msgs, o.maxTokens)
    pre.push({ turn: i + 1, ...t, metrics: diff(m0, await metrics(s.url)) })
  }
  const w = await waitWrites(s.url)
  const stop1 = await s.stop('SIGTERM')
  live.delete(s)
  const files = phkv(kv)
  const written = w.metrics
  for (const p of pre) emit({ engine: 'pinhole', part, tag, phase: `turn ${p.turn} (before restart)`, ...p })
  emit({ engine: 'pinhole', part, tag, phase: 'checkpoints written', writes_waited_s: w.waited_s,
         saves: written.disk_cache_saves_total, skipped: written.disk_cache_skipped_total,
         evictions: written.disk_cache_evictions_total,
         written_bytes: written.disk_cache_written_bytes_total, write_s: written.disk_cache_write_seconds_total,
         write_mb_per_s: round(written.disk_cache_written_bytes_total / 1e6 / written.disk_cache_write_seconds_total, 1),
         files, stop: stop1, server_start_line: startLine, quiet: q0 })
  // snapshot of the folder, so that every repetition resumes from the same files
  const snap = `${kv}.after`
  fs.rmSync(snap, { recursive: true, force: true })
  execFileSync('cp', ['-a', kv, snap])
  const out = []
  for (let rep = 1; rep <= o.reps; rep++) {
    for (const cache of o.pageCache) {
      fs.rmSync(kv, { recursive: true, force: true })
      execFileSync('cp', ['-a', snap, kv])
      const resident = cache === 'cold' ? dropPages(kv) : undefined
      const q = await waitQuiet(`${tag} pinhole resumed`)
      s = await startPinhole(o, { ctx, kvDir: kv, logFile: path.join(o.tmp, `${tag}-pinhole-2-${rep}-${cache}.log`) })
      // warmup: one short unrelated request first (llama-server runs a warm-up
      // pass at start by default; pinhole does not): the weights are then paged in
      const warm = cache === 'warmup' ? await turn(s.url, WARMUP, 1) : null
      const m0 = await metrics(s.url)
      const t = await turn(s.url, after, o.maxTokens)
      const m1 = await metrics(s.url)
      await waitWrites(s.url)
      const stop2 = await s.stop('SIGTERM')
      live.delete(s)
      const d = diff(m0, m1)
      const line = { engine: 'pinhole', part, tag, phase: 'resumed turn after restart', rep, page_cache: cache,
                     ...(cache === 'cold' ? { cold_method: COLD_METHOD, resident_bytes_after_drop: resident } : {}),
                     size_tokens: sizeTokens, ...t, ...(warm ? { warmup_request_s: warm.total_s } : {}),
                     tokens_restored: d.disk_cache_tokens_restored_total, images_encoded: d.images_encoded_total,
                     disk_hits: d.disk_cache_hits_total, read_s: d.disk_cache_read_seconds_total,
                     read_bytes: d.disk_cache_read_bytes_total, prefilled: d.prompt_tokens_prefilled_total,
                     files, server_start_s: s.start_s, stop: stop2, log: logLines(s, PH_LOG), quiet: q }
      emit(line)
      out.push(line)
    }
  }
  return out
}

// Drops the pages of a folder's files from the page cache, so that the next
// read comes from the disk: sync first (a file just written or copied has
// dirty pages, which posix_fadvise(DONTNEED) leaves in place), then dd's
// nocache with count=0 (posix_fadvise DONTNEED on the whole file). Returns
// the bytes still resident afterwards (fincore), as evidence.
const COLD_METHOD = 'sync FILES, then dd if=FILE iflag=nocache count=0'
function dropPages(dir) {
  const files = fs.readdirSync(dir).map((f) => path.join(dir, f)).filter((f) => fs.statSync(f).isFile())
  try { execFileSync('sync', files, { stdio: 'ignore' }) } catch { /* best effort */ }
  for (const f of files) {
    try { execFileSync('dd', [`if=${f}`, 'iflag=nocache', 'count=0'], { stdio: 'ignore' }) } catch { /* best effort */ }
  }
  try {
    const out = execFileSync('fincore', ['--bytes', '--noheadings', '--output', 'RES', ...files], { encoding: 'utf8' })
    return out.trim().split('\n').reduce((a, x) => a + Number(x.trim() || 0), 0)
  } catch { return null }
}

// ---- llama-server: turns, slot save, restart, (recompute | restore), resumed turn --
async function llamaRestart(o, { part, ctx, before, after, tag, recompute, sizeTokens }) {
  const slots = path.join(o.tmp, `${tag}-slots`)
  fs.rmSync(slots, { recursive: true, force: true })
  fs.mkdirSync(slots, { recursive: true })
  const file = `${tag}.bin`
  const q0 = await waitQuiet(`${tag} llama-server`)
  let s = await startLlama(o, { ctx, slotDir: slots, logFile: path.join(o.tmp, `${tag}-llama-1.log`) })
  for (const [i, msgs] of before.entries()) {
    const t = await turn(s.url, msgs, o.maxTokens)
    emit({ engine: 'llama-server', part, tag, phase: `turn ${i + 1} (before restart)`, turn: i + 1, ...t,
           ...(i === 0 ? { server: s.cmd, quiet: q0 } : {}) })
  }
  const save = await slotAction(s.url, 'save', file)
  const sizes = fs.readdirSync(slots).map((f) => ({ name: f, bytes: fs.statSync(path.join(slots, f)).size }))
  const stop1 = await s.stop('SIGTERM')
  live.delete(s)
  emit({ engine: 'llama-server', part, tag, phase: 'slot save', ...save, files: sizes, stop: stop1,
         log: logLines(s, /slot save|save/i).slice(-5) })
  const out = { save }
  if (recompute) {
    const q = await waitQuiet(`${tag} llama-server recompute`)
    s = await startLlama(o, { ctx, slotDir: null, logFile: path.join(o.tmp, `${tag}-llama-recompute.log`) })
    const t = await turn(s.url, after, o.maxTokens)
    const stop = await s.stop('SIGTERM')
    live.delete(s)
    out.recompute = { engine: 'llama-server', part: 'B', tag, phase: 'resumed turn after restart, recomputed',
                      size_tokens: sizeTokens, ...t, server: s.cmd, server_start_s: s.start_s, stop,
                      log: logLines(s, LL_LOG).slice(-12), quiet: q }
    emit(out.recompute)
  }
  out.restores = []
  if (save.ok) {
    for (let rep = 1; rep <= o.reps; rep++) {
      for (const cache of o.pageCache.filter((c) => c !== 'warmup')) { // it warms up at start anyway
        const resident = cache === 'cold' ? dropPages(slots) : undefined
        const q = await waitQuiet(`${tag} llama-server restore`)
        s = await startLlama(o, { ctx, slotDir: slots, logFile: path.join(o.tmp, `${tag}-llama-restore-${rep}-${cache}.log`) })
        const restore = await slotAction(s.url, 'restore', file)
        const t = restore.ok ? await turn(s.url, after, o.maxTokens) : null
        const stop = await s.stop('SIGTERM')
        live.delete(s)
        const rms = restore.body?.timings?.restore_ms
        const line = { engine: 'llama-server', part: recompute ? 'C' : part, tag,
                       phase: 'resumed turn after restart, slot restored', rep, page_cache: cache,
                       ...(cache === 'cold' ? { cold_method: COLD_METHOD, resident_bytes_after_drop: resident } : {}),
                       size_tokens: sizeTokens, restore, restore_s: rms == null ? null : round(rms / 1000),
                       ...(t ?? {}), ttft_plus_restore_s: t ? round(t.ttft_s + restore.wall_s) : null,
                       files: sizes, server: s.cmd, server_start_s: s.start_s, stop,
                       log: logLines(s, LL_LOG).slice(-12), quiet: q }
        emit(line)
        out.restores.push(line)
      }
    }
  }
  return out
}

// ---- run -----------------------------------------------------------------------------
async function run(o) {
  const uri = `data:image/png;base64,${fs.readFileSync(o.picture).toString('base64')}`
  const parts = o.parts
  const pic = { before: [pictureChat(uri, 1), pictureChat(uri, 2)], after: pictureChat(uri, 3) }
  const t0 = performance.now()
  const elapsed = () => round((performance.now() - t0) / 1000, 1)
  if (parts.includes('A') && o.engines.includes('pinhole')) {
    await pinholeRestart(o, { part: 'A', ctx: o.ctx, ...pic, tag: 'picture' })
    log(`A done at ${elapsed()} s`)
  }
  let needText = false
  if (parts.includes('BC') && o.engines.includes('llama')) {
    const r = await llamaRestart(o, { part: 'C', ctx: o.ctx, ...pic, tag: 'picture', recompute: true })
    if (!r.save.ok) {
      needText = true
      emit({ engine: 'llama-server', part: 'C', tag: 'picture', phase: 'slot save refused', status: r.save.status,
             error: r.save.body })
    }
    log(`B and C done at ${elapsed()} s`)
  }
  if (needText || parts.includes('T')) {
    const n = 800
    const txt = { before: [textChat(n, 1)], after: textChat(n, 2) }
    if (o.engines.includes('pinhole')) await pinholeRestart(o, { part: 'T', ctx: o.ctx, ...txt, tag: `text${n}`, sizeTokens: n })
    if (o.engines.includes('llama')) await llamaRestart(o, { part: 'T', ctx: o.ctx, ...txt, tag: `text${n}`, recompute: false, sizeTokens: n })
    log(`T done at ${elapsed()} s`)
  }
  if (parts.includes('D')) {
    for (const n of o.sizes) {
      const txt = { before: [textChat(n, 1)], after: textChat(n, 2) }
      if (o.engines.includes('pinhole')) await pinholeRestart(o, { part: 'D', ctx: o.dctx, ...txt, tag: `text${n}`, sizeTokens: n })
      if (o.engines.includes('llama')) await llamaRestart(o, { part: 'D', ctx: o.dctx, ...txt, tag: `text${n}`, recompute: false, sizeTokens: n })
      log(`D ${n} done at ${elapsed()} s`)
    }
  }
}

// ---- table ------------------------------------------------------------------------------
const CACHE_NAME = { warm: 'page cache warm', cold: 'page cache cold', warmup: 'page cache warm, after a warm-up request' }
function table(files) {
  const rows = files.flatMap((f) => fs.readFileSync(f, 'utf8').trim().split('\n').filter(Boolean)).map((l) => JSON.parse(l))
  const med = (xs) => {
    const v = xs.filter((x) => x != null && !Number.isNaN(x)).sort((a, b) => a - b), h = v.length >> 1
    return v.length ? (v.length % 2 ? v[h] : (v[h - 1] + v[h]) / 2) : null
  }
  const f2 = (x) => (x == null ? '-' : x.toFixed(2))
  const f3 = (x) => (x == null ? '-' : x.toFixed(3))
  const mb = (b) => (b == null ? '-' : (b / 1e6).toFixed(1))
  const ratio = (a, b) => (a == null || b == null ? '-' : `${(a / b).toFixed(2)}x`)
  // pinhole 'cold' lines without cold_method come from a version of this
  // script that dropped the pages of freshly copied (dirty) files, which
  // posix_fadvise leaves in the page cache: they were not cold, and are left out
  const sel = (eng, tag, re, cache) => rows.filter((r) => r.engine === eng && r.tag === tag && re.test(r.phase ?? '') &&
                                                      (!cache || (r.page_cache ?? 'warm') === cache) &&
                                                      !(eng === 'pinhole' && r.page_cache === 'cold' && !r.cold_method))
  // one resumed turn, medians over repetitions: restore (s; pinhole: inside the TTFT), TTFT, restore + TTFT
  const pin = (tag, cache) => {
    const p = sel('pinhole', tag, /^resumed/, cache)
    if (!p.length) return null
    const ttft = med(p.map((r) => r.ttft_s)), start = med(p.map((r) => r.server_start_s))
    return { n: p.length, r: p[0], start, restore: med(p.map((r) => r.read_s)), ttft, total: ttft, first: start + ttft,
             prompt: p[0].prompt_tokens, reused: p[0].cached_tokens, prefilled: p[0].prefilled, encoded: p[0].images_encoded }
  }
  const lla = (tag, cache, recomputed) => {
    const c = recomputed ? sel('llama-server', tag, /recomputed/) : sel('llama-server', tag, /slot restored/, cache)
    if (!c.length) return null
    const ttft = med(c.map((r) => r.ttft_s)), start = med(c.map((r) => r.server_start_s))
    const restore = recomputed ? 0 : med(c.map((r) => r.restore?.wall_s))
    return { n: c.length, r: c[0], start, restore: recomputed ? null : restore, restoreOwn: recomputed ? null : med(c.map((r) => r.restore_s)),
             ttft, total: ttft + restore, first: start + restore + ttft,
             prompt: c[0].prompt_tokens, reused: c[0].timings?.cache_n ?? c[0].cached_tokens,
             prefilled: c[0].timings?.prompt_n ?? Number((c[0].log ?? []).map((l) => /prompt eval time =\s*[\d.]+ ms \/\s*(\d+) tokens/.exec(l)?.[1]).filter(Boolean).pop() ?? NaN),
             encoded: recomputed ? 1 : 0 }
  }
  let out = ''
  const head = (cols) => `| ${cols.join(' | ')} |\n|${cols.map((_, i) => (i ? '---:' : '---')).join('|')}|\n`
  // the picture chat's turn 3
  const pw = pin('picture', 'warm')
  if (pw) {
    out += head(['turn 3 after a restart', 'server start s', 'restore s', 'TTFT s', 'restore + TTFT s', 'start to first token s',
                 'prompt / reused / prefilled tokens', 'pictures encoded', 'restore + TTFT: llama-server / pinhole'])
    const line = (name, x, cmp, restoreTxt) => {
      out += `| ${name} | ${f2(x.start)} | ${restoreTxt} | ${f2(x.ttft)} | ${f2(x.total)} | ${f2(x.first)} | ` +
             `${x.prompt ?? '-'} / ${x.reused ?? '-'} / ${x.prefilled ?? '-'} | ${x.encoded ?? '-'} | ${cmp ? ratio(x.total, cmp.total) : '-'} |\n`
    }
    for (const cache of ['warm', 'cold', 'warmup']) {
      const p = pin('picture', cache)
      if (p) line(`pinhole, from its checkpoint file (${CACHE_NAME[cache]}; n=${p.n})`, p, null, `${f3(p.restore)} (within TTFT)`)
    }
    const b = lla('picture', null, true)
    if (b) line(`llama-server, recomputed (picture encoded again; n=${b.n})`, b, pw, '-')
    for (const cache of ['warm', 'cold']) {
      const c = lla('picture', cache), p = pin('picture', cache)
      if (c) line(`llama-server, slot restored (${CACHE_NAME[cache]}; n=${c.n})`, c, p, `${f3(c.restore)} (its own: ${f3(c.restoreOwn)})`)
    }
    const refused = rows.find((r) => r.phase === 'slot save refused')
    if (refused) out += `\nllama-server refused to save the picture chat's slot: HTTP ${refused.status}: ${JSON.stringify(refused.error)}\n`
  }
  // writes (medians over the runs in the files)
  const byTag = (xs) => [...new Set(xs.map((r) => r.tag))].map((t) => [t, xs.filter((r) => r.tag === t)])
  const w = rows.filter((r) => r.engine === 'pinhole' && r.phase === 'checkpoints written')
  if (w.length) {
    out += '\n' + head(['pinhole: checkpoint files written up to the restart', 'runs', 'files written', 'MB written', 'writer s', 'MB/s', 'files kept (MB)'])
    for (const [t, xs] of byTag(w)) {
      out += `| ${t} | ${xs.length} | ${xs[0].saves} | ${mb(xs[0].written_bytes)} | ${f3(med(xs.map((r) => r.write_s)))} | ` +
             `${med(xs.map((r) => r.write_mb_per_s)).toFixed(0)} | ${xs[0].files.map((x) => mb(x.bytes)).join(', ')} |\n`
    }
    const saves = rows.filter((r) => r.engine === 'llama-server' && r.phase === 'slot save' && r.ok)
    if (saves.length) {
      out += '\n' + head(['llama-server: slot save (explicit request)', 'runs', 'tokens', 'file MB', 'save s (its own)', 'MB/s'])
      for (const [t, xs] of byTag(saves)) {
        const ms = med(xs.map((r) => r.body?.timings?.save_ms))
        out += `| ${t} | ${xs.length} | ${xs[0].body?.n_saved} | ${mb(xs[0].body?.n_written)} | ${f3(ms / 1000)} | ${(xs[0].body?.n_written / 1e6 / (ms / 1000)).toFixed(0)} |\n`
      }
    }
  }
  // restore against size (text chats)
  const tags = [...new Set(rows.filter((r) => /^text\d+$/.test(r.tag ?? '') && /^resumed/.test(r.phase ?? '')).map((r) => r.tag))]
    .sort((a, b) => Number(a.slice(4)) - Number(b.slice(4)))
  for (const cache of ['warm', 'cold', 'warmup']) {
    if (!tags.some((t) => pin(t, cache))) continue
    out += `\nText chats, ${CACHE_NAME[cache]}${cache === 'warmup' ? ' (pinhole; llama-server: page cache warm)' : ''}:\n\n`
    out += head(['turn 2 after a restart', 'prompt tokens', 'pinhole file MB', 'pinhole read s', 'read GB/s', 'pinhole TTFT s',
                 'llama-server file MB', 'llama-server restore s (its own)', 'GB/s', 'llama-server TTFT s', 'restore + TTFT s',
                 'llama-server / pinhole'])
    for (const t of tags) {
      const p = pin(t, cache), c = lla(t, cache === 'warmup' ? 'warm' : cache)
      const pbytes = p?.r.read_bytes, cbytes = c?.r.restore?.body?.n_read
      out += `| ~${t.slice(4)} tokens (n=${p?.n ?? 0}/${c?.n ?? 0}) | ${p?.prompt ?? c?.prompt ?? '-'} | ${p ? p.r.files.map((x) => mb(x.bytes)).join(' + ') : '-'} | ` +
             `${f3(p?.restore)} | ${p?.restore ? (pbytes / 1e9 / p.restore).toFixed(2) : '-'} | ${f2(p?.ttft)} | ` +
             `${c ? mb(cbytes) : '-'} | ${c ? `${f3(c.restore)} (${f3(c.restoreOwn)})` : '-'} | ${c?.restoreOwn ? (cbytes / 1e9 / c.restoreOwn).toFixed(2) : '-'} | ` +
             `${f2(c?.ttft)} | ${f2(c?.total)} | ${c && p ? ratio(c.total, p.ttft) : '-'} |\n`
    }
  }
  process.stdout.write(out)
}

// ---- command line ---------------------------------------------------------------------
const argv = process.argv.slice(2)
const cmd = argv.shift()
if (cmd === 'table') {
  table(argv)
} else if (cmd === 'quiet') {
  process.stdout.write(JSON.stringify(await waitQuiet(argv[0] || 'quiet')) + '\n')
} else if (cmd === 'run') {
  const opt = (name, def) => { const i = argv.indexOf(`--${name}`); return i >= 0 ? argv[i + 1] : def }
  const o = {
    pinhole: opt('pinhole'), llamaServer: opt('llama-server'), model: opt('model'), mmproj: opt('mmproj'),
    picture: opt('picture'), tmp: opt('tmp'), threads: Number(opt('threads', 2)), ctx: Number(opt('ctx', 8192)),
    dctx: Number(opt('d-ctx', 16384)), parts: opt('parts', 'A BC D').split(/\s+/),
    sizes: opt('sizes', '1024,2048,4096,8192').split(',').filter(Boolean).map(Number), reps: Number(opt('reps', 1)),
    maxTokens: Number(opt('max-tokens', 8)), engines: opt('engines', 'pinhole,llama').split(','), pageCache: opt('page-cache', 'warm').split(','),
  }
  for (const k of ['pinhole', 'llamaServer', 'model', 'mmproj', 'picture', 'tmp']) {
    if (!o[k]) { log(`missing --${k.replace(/[A-Z]/g, (c) => '-' + c.toLowerCase())}`); process.exit(2) }
  }
  await run(o)
} else {
  process.stderr.write('usage: node bench/restart.mjs run --pinhole BIN --llama-server BIN --model M --mmproj MM --picture P --tmp DIR [...]\n' +
                       '       node bench/restart.mjs table FILE.jsonl...\n')
  process.exit(2)
}
