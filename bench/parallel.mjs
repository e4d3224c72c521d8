#!/usr/bin/env node
// Several requests at once (issue 26): the client of bench/parallel.sh. Sends
// the same streaming Chat Completions requests to pinhole serve or to the
// native llama-server and prints one JSON line per measurement.
//
//   node bench/parallel.mjs SCENARIO ENGINE URL --model LLM.gguf [--picture PIC.png] [--pass main|main+sides]
//   node bench/parallel.mjs table FILE.jsonl [MORE.jsonl ...]     (the Markdown tables)
//
// SCENARIO: agg | gap | siblings | agent; ENGINE: pinhole | llama-server (a
// label, and which /metrics counters to read). Sizes come from the
// environment (defaults in KNOBS below). Every request is greedy
// (temperature 0) and bans the model's end-of-turn and control tokens with
// logit_bias -100 (read from the GGUF's tokenizer), so that both engines
// answer with exactly max_tokens tokens; a line's "short" counts the answers
// that came back with fewer (llama-server's requests also ban the tokens that
// are not UTF-8 alone: see bannedTokens). Prompts are made of common English
// words from a seeded generator: the same bytes for both engines.
import fs from 'node:fs'

const env = (k, d) => (process.env[k] === undefined || process.env[k] === '' ? d : process.env[k])
const num = (k, d) => Number(env(k, d))
const KNOBS = {
  AGG_CLIENTS: env('AGG_CLIENTS', '1 2 4 8').split(/\s+/).filter(Boolean).map(Number),
  AGG_PROMPT: num('AGG_PROMPT', 128), // tokens (about) per prompt
  AGG_TOKENS: num('AGG_TOKENS', 128),
  GAP_STREAMS: num('GAP_STREAMS', 3),
  GAP_PROMPT: num('GAP_PROMPT', 128),
  GAP_TOKENS: num('GAP_TOKENS', 1500), // at most: stopped 1 s after the picture's answer
  GAP_DELAY_S: num('GAP_DELAY_S', 2), // after the streams' first tokens
  PIC_TOKENS: num('PIC_TOKENS', 16),
  SIB_N: num('SIB_N', 4),
  SIB_PREFIX: num('SIB_PREFIX', 2048),
  SIB_TOKENS: num('SIB_TOKENS', 16),
  PROMPT_TOKENS: num('PROMPT_TOKENS', 12288), // agent: system prompt words, tools included
  AGENT_TURNS: num('AGENT_TURNS', 4),
  AGENT_TOKENS: num('AGENT_TOKENS', 32),
  SIDE_TOKENS: num('SIDE_TOKENS', 16),
}

// ---- prompts ----------------------------------------------------------------
const WORDS = ('the of and to in is you that it he was for on are as with his they at be this have from or one ' +
  'had by word but not what all were we when your can said there use an each which she do how their if will up ' +
  'other about out many then them these so some her would make like him into time has look two more write go see ' +
  'number no way could people my than first water been call who its now find long down day did get come made may ' +
  'part over new sound take only little work know place year live me back give most very after thing our just ' +
  'name good sentence man think say great where help through much before line too mean old any same tell boy ' +
  'follow came want show also around form three set put end does another well must big even such because turn ' +
  'why ask went men read need land different home us move try kind hand again change off play air away animal ' +
  'house point page letter mother answer found study still learn should world high every near add food between ' +
  'own below country plant last school father keep tree never start city earth eye light thought head story saw ' +
  'far sea draw late run while press close night real life few north open seem together next begin got walk ' +
  'example paper').split(' ')

function rng(seed) {
  let a = (seed * 2654435761) >>> 0
  return () => {
    a = (a + 0x6d2b79f5) >>> 0
    let t = a
    t = Math.imul(t ^ (t >>> 15), t | 1)
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61)
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296
  }
}

// n words from seed, in sentences of 12.
function words(n, seed) {
  const r = rng(seed)
  const out = []
  for (let i = 0; i < n; i++) {
    let w = WORDS[Math.floor(r() * WORDS.length)]
    if (i % 12 === 0) w = w[0].toUpperCase() + w.slice(1)
    out.push(i % 12 === 11 || i === n - 1 ? w + '.' : w)
  }
  return out.join(' ')
}

// Words for about t tokens: most words are one token with the Qwen vocabulary,
// the capitals and full stops add about 7%.
const wordsFor = (t) => Math.max(1, Math.round(t / 1.07))

// ---- the tokens to ban, from the GGUF header ---------------------------------
function ggufTokens(file) {
  const fd = fs.openSync(file, 'r')
  let buf = Buffer.alloc(0), start = 0, pos = 0
  const need = (n) => {
    if (pos + n <= start + buf.length) return
    const len = Math.max(n, 1 << 22)
    const b = Buffer.alloc(len)
    const got = fs.readSync(fd, b, 0, len, pos)
    if (got < n) throw new Error(`${file}: truncated GGUF header`)
    buf = b.subarray(0, got)
    start = pos
  }
  const SIZE = { 0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8 }
  const u32 = () => { need(4); const v = buf.readUInt32LE(pos - start); pos += 4; return v }
  const i32 = () => { need(4); const v = buf.readInt32LE(pos - start); pos += 4; return v }
  const u64 = () => { need(8); const v = Number(buf.readBigUInt64LE(pos - start)); pos += 8; return v }
  const str = () => { const n = u64(); need(n); const s = buf.toString('utf8', pos - start, pos - start + n); pos += n; return s }
  const value = (t) => {
    if (t === 8) return str()
    if (t === 9) {
      const et = u32(), n = u64(), a = []
      for (let i = 0; i < n; i++) a.push(value(et))
      return a
    }
    if (t === 4) return u32()
    if (t === 5) return i32()
    if (!SIZE[t]) throw new Error(`${file}: bad GGUF metadata type ${t}`)
    need(SIZE[t]); pos += SIZE[t]
    return undefined
  }
  need(4)
  if (buf.toString('latin1', 0, 4) !== 'GGUF') throw new Error(`${file}: not a GGUF file`)
  pos = 4
  u32(); u64()
  const nKv = u64(), kv = {}
  for (let i = 0; i < nKv; i++) {
    const key = str(), t = u32()
    if (key.startsWith('tokenizer.ggml.') && key !== 'tokenizer.ggml.merges') kv[key] = value(t)
    else if (t === 9) { const et = u32(), n = u64(); if (et === 8) for (let k = 0; k < n; k++) str(); else pos += SIZE[et] * n }
    else value(t)
  }
  fs.closeSync(fd)
  return kv
}

// End-of-generation ids, control tokens (type 3) and the think / tool-call
// markers: banned, so that answers run to max_tokens and stay plain text.
// With `utf8`, also every token whose bytes are not valid UTF-8 on their own
// (a byte-level BPE's pieces of characters; 1448 in Qwen's vocabulary): this
// llama-server parses every answer as it streams, and at the first invalid
// byte sequence it sends an error and nothing more of the answer (a random
// model's output has them; pinhole passes them on and allows 1024 biases).
function bannedTokens(model, utf8) {
  const kv = ggufTokens(model)
  const toks = kv['tokenizer.ggml.tokens'] || [], types = kv['tokenizer.ggml.token_type'] || []
  const ids = new Set(['eos', 'eot', 'eom'].map((k) => kv[`tokenizer.ggml.${k}_token_id`]).filter((x) => x !== undefined))
  toks.forEach((t, i) => {
    if (types[i] === 3 || /^<\|.*\|>$/.test(t) || /^<\/?(think|tool_call|tool_response)>$/.test(t)) ids.add(i)
  })
  if (utf8 && kv['tokenizer.ggml.model'] === 'gpt2') {
    // GPT-2's byte-to-character map, inverted
    const bs = [], cs = []
    for (let b = 0; b < 256; b++) if ((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174) { bs.push(b); cs.push(b) }
    for (let b = 0, n = 0; b < 256; b++) if (!bs.includes(b)) { bs.push(b); cs.push(256 + n++) }
    const byteOf = new Map(cs.map((c, i) => [String.fromCodePoint(c), bs[i]]))
    const strict = new TextDecoder('utf-8', { fatal: true })
    toks.forEach((t, i) => {
      if (types[i] !== 1) return
      const bytes = [...t].map((ch) => byteOf.get(ch))
      if (bytes.some((x) => x === undefined)) return
      try { strict.decode(new Uint8Array(bytes)) } catch { ids.add(i) }
    })
  }
  return Object.fromEntries([...ids].map((i) => [String(i), -100]))
}

// ---- one streamed request -----------------------------------------------------
let BANS = {}
let ENGINE = ''
let MODEL_NAME = '' // the LLM file's name, without .gguf: which model a line measured
let URL_ = ''

const newResult = () => ({ t0: performance.now(), first: null, times: [], usage: null, error: null, text: '',
                           ctl: new AbortController(), stopped: false })

// Sends one request; r (a newResult()) is filled as the tokens come;
// r.stopped = true and r.ctl.abort() end it early (not an error).
async function stream(messages, maxTokens, extra = {}, r = newResult()) {
  try {
    const res = await fetch(`${URL_}/v1/chat/completions`, {
      method: 'POST', headers: { 'content-type': 'application/json' }, signal: r.ctl.signal,
      body: JSON.stringify({ model: 'any', messages, max_tokens: maxTokens, temperature: 0, stream: true,
                             stream_options: { include_usage: true }, logit_bias: BANS, ...extra }),
    })
    if (!res.ok) { r.error = `HTTP ${res.status}: ${(await res.text()).slice(0, 300)}`; r.end = performance.now(); return r }
    const dec = new TextDecoder()
    let pending = ''
    for await (const chunk of res.body) {
      const now = performance.now()
      pending += dec.decode(chunk, { stream: true })
      let nl
      while ((nl = pending.indexOf('\n')) >= 0) {
        const line = pending.slice(0, nl).trim()
        pending = pending.slice(nl + 1)
        if (!line.startsWith('data:')) continue
        const data = line.slice(5).trim()
        if (data === '[DONE]') continue
        let j
        try { j = JSON.parse(data) } catch { continue }
        if (j.error) r.error = JSON.stringify(j.error).slice(0, 300)
        if (j.usage) r.usage = j.usage
        const d = j.choices?.[0]?.delta
        const piece = (d?.content || '') + (d?.reasoning_content || '')
        if (piece) {
          if (r.first === null) r.first = now
          r.times.push(now)
          r.text += d?.content || ''
        }
      }
    }
  } catch (e) {
    if (!r.stopped) r.error = String(e)
  }
  r.end = performance.now()
  return r
}
const tokensOf = (r) => r.usage?.completion_tokens ?? r.times.length
const promptOf = (r) => r.usage?.prompt_tokens ?? null
const cachedOf = (r) => r.usage?.prompt_tokens_details?.cached_tokens ?? null
const ttft = (r) => (r.first === null ? null : (r.first - r.t0) / 1000)
const round = (x, d = 3) => (x === null || x === undefined || !Number.isFinite(x) ? null : Number(x.toFixed(d)))
const sleep = (ms) => new Promise((res) => setTimeout(res, ms))
const out = (o) => process.stdout.write(JSON.stringify({ engine: ENGINE, model: MODEL_NAME, ...o }) + '\n')
const user = (text) => ({ role: 'user', content: text })
// a system message in every request: a template's default one (Qwen2's) is then never added
const SYSTEM = { role: 'system', content: 'You are a helpful assistant.' }
const picMessage = (uri, text) => ({ role: 'user', content: [{ type: 'image_url', image_url: { url: uri } }, { type: 'text', text }] })

// Counters of /metrics: pinhole's own, or llama-server's (started with --metrics).
const METRICS = {
  pinhole: { prefilled: 'pinhole_prompt_tokens_prefilled_total', reused: 'pinhole_prompt_tokens_reused_total',
             batch_prefill: 'pinhole_batch_prefill_tokens_total', batch_steps: 'pinhole_batch_steps_total',
             shared_steps: 'pinhole_batch_steps_shared_total', encoded: 'pinhole_images_encoded_total',
             image_cache_hits: 'pinhole_image_cache_hits_total', slices: 'pinhole_batch_slices_total' },
  'llama-server': { prefilled: 'llamacpp:prompt_tokens_total', reused: 'llamacpp:prompt_tokens_cached_total',
                    decode_calls: 'llamacpp:n_decode_total' },
}
async function metrics() {
  let t = ''
  try { t = await (await fetch(`${URL_}/metrics`)).text() } catch { return {} }
  const o = {}
  for (const [k, name] of Object.entries(METRICS[ENGINE] || {})) {
    const m = t.match(new RegExp(`^${name.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')} (\\S+)`, 'm'))
    if (m) o[k] = Number(m[1])
  }
  return o
}
const delta = (a, b) => Object.fromEntries(Object.keys(b).filter((k) => k in a).map((k) => [k, b[k] - a[k]]))

// One short untimed request: pinhole pages its weights in on the first one,
// llama-server runs a warm-up pass when it starts.
async function warmUp() {
  const r = await stream([SYSTEM, user(words(16, 999999))], 16)
  if (r.error) throw new Error(`warm-up request failed: ${r.error}`)
}

// ---- scenarios ----------------------------------------------------------------
async function agg() {
  for (const [run, n] of KNOBS.AGG_CLIENTS.entries()) {
    // distinct prompts (from their first words) across clients and runs: nothing reused
    const rs = await Promise.all(Array.from({ length: n }, (_, i) =>
      stream([SYSTEM, user(words(wordsFor(KNOBS.AGG_PROMPT), 1000 * run + i))], KNOBS.AGG_TOKENS)))
    const errors = rs.filter((r) => r.error).map((r) => r.error)
    const ok = rs.filter((r) => r.first !== null)
    const tokens = rs.reduce((s, r) => s + tokensOf(r), 0)
    const t0 = Math.min(...rs.map((r) => r.t0)), first = Math.min(...ok.map((r) => r.first))
    const last = Math.max(...ok.map((r) => r.times[r.times.length - 1]))
    const per = ok.map((r) => (tokensOf(r) - 1) / ((r.times[r.times.length - 1] - r.first) / 1000))
    // while every client streams: from the last first token to the first last token (the
    // decode rate alone, without the steps that still prefill other clients' prompts)
    const a = Math.max(...ok.map((r) => r.first)), b = Math.min(...ok.map((r) => r.times[r.times.length - 1]))
    const inAll = ok.reduce((s, r) => s + r.times.filter((t) => t > a && t <= b).length, 0)
    out({ scenario: 'agg', clients: n, max_tokens: KNOBS.AGG_TOKENS, tokens, short: rs.filter((r) => tokensOf(r) < KNOBS.AGG_TOKENS).length,
          prompt_tokens: rs.map(promptOf), decode_s: round((last - first) / 1000), wall_s: round((last - t0) / 1000),
          agg_tok_s: round(tokens / ((last - first) / 1000), 2),
          all_streaming_s: round((b - a) / 1000), all_streaming_tok_s: b > a ? round(inAll / ((b - a) / 1000), 2) : null,
          agg_tok_s_wall: round(tokens / ((last - t0) / 1000), 2),
          client_tok_s_mean: round(per.reduce((s, x) => s + x, 0) / per.length, 2), client_tok_s_min: round(Math.min(...per), 2),
          ttft_max_s: round(Math.max(...ok.map(ttft))), errors })
  }
}

const quantile = (xs, q) => {
  if (!xs.length) return null
  const s = [...xs].sort((a, b) => a - b)
  return s[Math.min(s.length - 1, Math.ceil(q * s.length) - 1)]
}

async function gapScenario(picture) {
  const uri = `data:image/png;base64,${fs.readFileSync(picture).toString('base64')}`
  const before = await metrics()
  const handles = Array.from({ length: KNOBS.GAP_STREAMS }, (_, i) => {
    const r = newResult(), p = stream([SYSTEM, user(words(wordsFor(KNOBS.GAP_PROMPT), 2000 + i))], KNOBS.GAP_TOKENS, {}, r)
    const h = { r, done: false }
    h.p = p.then((x) => { h.done = true; return x })
    return h
  })
  const t0 = performance.now()
  while (!handles.every((h) => h.r.first !== null)) {
    if (handles.some((h) => h.done)) break
    if (performance.now() - t0 > 600000) throw new Error('the text streams did not start in 600 s')
    await sleep(20)
  }
  await sleep(KNOBS.GAP_DELAY_S * 1000)
  const pic = await stream([SYSTEM, picMessage(uri, 'Describe the picture in a few words.')], KNOBS.PIC_TOKENS)
  // the answers need not run to GAP_TOKENS: they are stopped a second after the picture's
  await sleep(1000)
  for (const h of handles) if (!h.done) { h.r.stopped = true; h.r.ctl.abort() }
  const rs = await Promise.all(handles.map((h) => h.p))
  const d = delta(before, await metrics())
  const streams = rs.map((r, i) => {
    // the gaps that end while the picture request is in flight, and before it
    const g = [], pre = []
    for (let k = 1; k < r.times.length; k++) {
      const gapS = (r.times[k] - r.times[k - 1]) / 1000
      if (r.times[k] > pic.t0 && r.times[k - 1] < pic.end) g.push(gapS)
      else if (r.times[k] <= pic.t0) pre.push(gapS)
    }
    return { stream: i, tokens: r.stopped ? r.times.length : tokensOf(r), stopped: r.stopped, gaps_during: g.length, max_gap_s: round(g.length ? Math.max(...g) : null),
             p95_gap_s: round(quantile(g, 0.95)), median_gap_before_s: round(quantile(pre, 0.5)),
             ended_before_picture: r.times.length > 0 && r.times[r.times.length - 1] < pic.end, error: r.error,
             gaps_s: g.map((x) => round(x)) }
  })
  out({ scenario: 'gap', streams, picture_ttft_s: round(ttft(pic)), picture_total_s: round((pic.end - pic.t0) / 1000),
        picture_prompt_tokens: promptOf(pic), picture_error: pic.error,
        max_gap_s: round(Math.max(...streams.map((s) => s.max_gap_s ?? 0))),
        p95_gap_s: round(Math.max(...streams.map((s) => s.p95_gap_s ?? 0))),
        short: rs.filter((r) => !r.stopped && tokensOf(r) < KNOBS.GAP_TOKENS).length, metrics: d })
}

async function siblings(picture) {
  const uri = `data:image/png;base64,${fs.readFileSync(picture).toString('base64')}`
  const system = { role: 'system', content: words(wordsFor(KNOBS.SIB_PREFIX), 3000) }
  const qs = ['What is in the picture?', 'Which colours are there?', 'Is there any text in it?', 'Describe the top left.',
              'What is at the bottom?', 'Is it a photo?', 'How many shapes are there?', 'What is in the center?']
  const before = await metrics()
  const rs = await Promise.all(Array.from({ length: KNOBS.SIB_N }, (_, i) =>
    stream([system, picMessage(uri, qs[i % qs.length] + (i >= qs.length ? ` Number ${i}.` : ''))], KNOBS.SIB_TOKENS)))
  const d = delta(before, await metrics())
  const t0 = Math.min(...rs.map((r) => r.t0))
  out({ scenario: 'siblings', requests: KNOBS.SIB_N, all_first_token_s: round((Math.max(...rs.map((r) => r.first ?? r.end)) - t0) / 1000),
        first_first_token_s: round((Math.min(...rs.map((r) => r.first ?? r.end)) - t0) / 1000),
        all_done_s: round((Math.max(...rs.map((r) => r.end)) - t0) / 1000), ttft_s: rs.map((r) => round(ttft(r))),
        prompt_tokens: rs.map(promptOf), cached_tokens: rs.map(cachedOf), short: rs.filter((r) => tokensOf(r) < KNOBS.SIB_TOKENS).length,
        metrics: d, errors: rs.filter((r) => r.error).map((r) => r.error) })
}

const TOOLS = ['read_file', 'write_file', 'run_command', 'search_files', 'list_folder', 'fetch_page'].map((name, i) => ({
  type: 'function',
  function: { name, description: words(40, 4000 + i),
              parameters: { type: 'object', properties: { path: { type: 'string', description: words(12, 4100 + i) },
                                                          text: { type: 'string', description: words(12, 4200 + i) } },
                            required: ['path'] } },
}))

async function agent(pass) {
  const sides = pass === 'main+sides'
  // the tools take about 900 tokens of the prompt (the chat template's tool section)
  const system = { role: 'system', content: words(wordsFor(Math.max(64, KNOBS.PROMPT_TOKENS - 900)), 5000) }
  const history = [system]
  for (let k = 1; k <= KNOBS.AGENT_TURNS; k++) {
    history.push(user(`Step ${k}: ${words(24, 6000 + k)}`))
    const before = await metrics()
    const r = await stream(history, KNOBS.AGENT_TOKENS, { tools: TOOLS })
    const d = delta(before, await metrics())
    out({ scenario: 'agent', pass, turn: k, ttft_s: round(ttft(r)), total_s: round((r.end - r.t0) / 1000),
          prompt_tokens: promptOf(r), cached_tokens: cachedOf(r), tokens: tokensOf(r), metrics: d, error: r.error })
    if (r.error) throw new Error(`agent turn ${k}: ${r.error}`)
    history.push({ role: 'assistant', content: r.text })
    if (sides) {
      const b2 = await metrics()
      const ss = await Promise.all(['Give this conversation a short title.', 'Summarize the last step in one line.'].map((q) =>
        stream([...history, user(q)], KNOBS.SIDE_TOKENS, { tools: TOOLS })))
      out({ scenario: 'agent-side', pass, turn: k, ttft_s: ss.map((s) => round(ttft(s))),
            total_s: round((Math.max(...ss.map((s) => s.end)) - Math.min(...ss.map((s) => s.t0))) / 1000),
            prompt_tokens: ss.map(promptOf), cached_tokens: ss.map(cachedOf), metrics: delta(b2, await metrics()),
            errors: ss.filter((s) => s.error).map((s) => s.error) })
    }
  }
}

// ---- tables -------------------------------------------------------------------
function table(files) {
  const rows = files.flatMap((f) => fs.readFileSync(f, 'utf8').split('\n').filter((l) => l.startsWith('{')))
    .map((l) => JSON.parse(l))
  const f = (x, d = 2) => (x === null || x === undefined ? '-' : Number(x).toFixed(d))
  const ratio = (l, p) => (l && p ? (l / p).toFixed(2) + 'x' : '-')
  const pick = (scenario, engine, key) => rows.filter((r) => r.scenario === scenario && r.engine === engine && (!key || key(r)))
  const last = (xs) => xs[xs.length - 1]
  let s = ''
  const agg = rows.filter((r) => r.scenario === 'agg')
  if (agg.length) {
    s += '**agg**: N clients at once, each a distinct prompt and AGG_TOKENS greedy tokens. Aggregate: all tokens over ' +
         'the time from the first client\'s first token to the last token (and over the whole wall time, from sending). ' +
         'All streaming: the tokens that came while every client was streaming (from the last first token to the first ' +
         'last token) over that time: the decode rate without the steps that still prefill other clients\' prompts.\n\n' +
         '| model | clients | pinhole tok/s | (whole wall) | all streaming | per client | llama-server tok/s | (whole wall) | all streaming | per client | pinhole / llama-server (all streaming) |\n' +
         '|---|---|---|---|---|---|---|---|---|---|---|\n'
    for (const mo of [...new Set(agg.map((r) => r.model ?? ''))])
    for (const n of [...new Set(agg.filter((r) => (r.model ?? '') === mo).map((r) => r.clients))].sort((a, b) => a - b)) {
      const at = (r) => r.clients === n && (r.model ?? '') === mo
      const p = last(pick('agg', 'pinhole', at)), l = last(pick('agg', 'llama-server', at))
      s += `| ${mo || '-'} | ${n} | ${f(p?.agg_tok_s)} | ${f(p?.agg_tok_s_wall)} | ${f(p?.all_streaming_tok_s)} | ${f(p?.client_tok_s_mean)} | ` +
           `${f(l?.agg_tok_s)} | ${f(l?.agg_tok_s_wall)} | ${f(l?.all_streaming_tok_s)} | ${f(l?.client_tok_s_mean)} | ` +
           `${ratio(p?.agg_tok_s, l?.agg_tok_s)} (${ratio(p?.all_streaming_tok_s, l?.all_streaming_tok_s)}) |\n`
    }
    s += '\n'
  }
  const gaps = rows.filter((r) => r.scenario === 'gap')
  if (gaps.length) {
    s += '**gap**: GAP_STREAMS text answers running; a picture request arrives GAP_DELAY_S later. The gaps between two ' +
         'tokens of the running answers while the picture request is in flight (the worst stream), and the picture\'s TTFT.\n\n' +
         '"Ran through": the streams still answering when the picture\'s answer ended (else their gaps cover only part of it).\n\n' +
         '| engine | max gap s | p95 gap s | median gap before s | picture TTFT s | picture prompt tokens | ran through |\n|---|---|---|---|---|---|---|\n'
    for (const e of ['pinhole', 'llama-server']) {
      const r = last(pick('gap', e))
      if (!r) continue
      const before = Math.max(...r.streams.map((x) => x.median_gap_before_s ?? 0))
      s += `| ${e} | ${f(r.max_gap_s)} | ${f(r.p95_gap_s)} | ${f(before, 3)} | ${f(r.picture_ttft_s)} | ${r.picture_prompt_tokens ?? '-'} | ` +
           `${r.streams.filter((x) => !x.ended_before_picture).length} of ${r.streams.length} |\n`
    }
    s += '\n'
  }
  const sib = rows.filter((r) => r.scenario === 'siblings')
  if (sib.length) {
    s += '**siblings**: SIB_N requests sent together, one system prompt of about SIB_PREFIX tokens and one picture, each a ' +
         'different question. Prefilled: prompt rows evaluated (pinhole_prompt_tokens_prefilled_total; ' +
         'llamacpp:prompt_tokens_total, the rows not taken from its cache); encoded: pictures through the vision tower ' +
         '(pinhole_images_encoded_total; llama-server has no such counter); embedding cache hits: pinhole_image_cache_hits_total.\n\n' +
         '| engine | all have a first token s | first one s | all done s | prompt tokens each | prefilled | encoded | embedding cache hits |\n|---|---|---|---|---|---|---|---|\n'
    for (const e of ['pinhole', 'llama-server']) {
      const r = last(pick('siblings', e))
      if (!r) continue
      s += `| ${e} | ${f(r.all_first_token_s)} | ${f(r.first_first_token_s)} | ${f(r.all_done_s)} | ${r.prompt_tokens[0] ?? '-'} | ` +
           `${r.metrics?.prefilled ?? '-'} | ${r.metrics?.encoded ?? '-'} | ${r.metrics?.image_cache_hits ?? '-'} |\n`
    }
    s += '\n'
  }
  const ag = rows.filter((r) => r.scenario === 'agent')
  if (ag.length) {
    s += '**agent**: a system prompt of about PROMPT_TOKENS tokens with tools; each main turn adds the previous answer and a ' +
         'user message; in pass main+sides two side calls (the same history, another last user message) follow each ' +
         'main turn, together. Main-turn TTFT in seconds (prompt tokens).\n\n' +
         '| turn | pinhole main only | pinhole with side calls | llama-server main only | llama-server with side calls |\n|---|---|---|---|---|\n'
    for (const k of [...new Set(ag.map((r) => r.turn))].sort((a, b) => a - b)) {
      const c = (e, pass) => {
        const r = last(pick('agent', e, (x) => x.turn === k && x.pass === pass))
        return r ? `${f(r.ttft_s)} (${r.prompt_tokens ?? '-'})` : '-'
      }
      s += `| ${k} | ${c('pinhole', 'main')} | ${c('pinhole', 'main+sides')} | ${c('llama-server', 'main')} | ${c('llama-server', 'main+sides')} |\n`
    }
  }
  const bad = rows.filter((r) => r.short || r.error || r.picture_error || r.errors?.length)
  if (bad.length) {
    s += '\nShort answers or errors: ' + bad.map((r) => `${r.engine} ${r.scenario}${r.clients ? ' ' + r.clients : ''}` +
         `${r.turn ? ' turn ' + r.turn : ''}: ${r.short ? r.short + ' short' : ''} ` +
         `${[r.error, r.picture_error, ...(r.errors || [])].filter(Boolean).join('; ').slice(0, 200)}`).join('; ') + '\n'
  }
  return s.trimEnd() + '\n'
}

// ---- main ---------------------------------------------------------------------
const argv = process.argv.slice(2)
if (argv[0] === 'table') {
  process.stdout.write(table(argv.slice(1)))
} else {
  const [scenario, engine, url] = argv
  const opt = (k) => { const i = argv.indexOf(k); return i >= 0 ? argv[i + 1] : undefined }
  const model = opt('--model'), picture = opt('--picture')
  if (!['agg', 'gap', 'siblings', 'agent'].includes(scenario) || !engine || !url || !model ||
      (['gap', 'siblings'].includes(scenario) && !picture)) {
    process.stderr.write('usage: node bench/parallel.mjs agg|gap|siblings|agent ENGINE URL --model LLM.gguf [--picture PIC.png]\n' +
                         '       node bench/parallel.mjs table FILE.jsonl ...\n')
    process.exit(2)
  }
  ENGINE = engine
  MODEL_NAME = model.replace(/^.*\//, '').replace(/\.gguf$/, '')
  URL_ = url.replace(/\/$/, '')
  BANS = bannedTokens(model, engine === 'llama-server')
  await warmUp()
  if (scenario === 'agg') await agg()
  else if (scenario === 'gap') await gapScenario(picture)
  else if (scenario === 'siblings') await siblings(picture)
  else await agent(opt('--pass') || 'main')
}
