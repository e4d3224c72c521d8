#!/usr/bin/env node
// The replicas' trace (issue 27; bench/cluster.sh runs it): picture
// conversations replayed through HAProxy, one request at a time, streamed,
// each answer sent back as history in the next turn.
//
//   node bench/cluster.mjs phase --url LB --replicas PORT,PORT,... --pictures DIR --state FILE
//        --turns 1|2,3,4 --config NAME [--session on|off] [--conversations 24] [--tokens 8]
//   node bench/cluster.mjs table JSONL
//
// phase: the given turns of every conversation (conversation c shows picture
// c % the pictures in DIR), turn by turn; --state keeps the conversations
// between phases; --session on sends X-Pinhole-Session: conv-C (off: no key,
// HAProxy spreads the requests). Prints one JSON line a turn (its time to
// first token, prompt and cached tokens, the replica that answered) and one
// for the phase: the pictures encoded and prompt rows evaluated on the
// replicas during it (their /metrics before and after).
import fs from 'node:fs'
import path from 'node:path'

const args = process.argv.slice(2)
const opt = (name, dflt) => {
  const i = args.indexOf(`--${name}`)
  return i >= 0 ? args[i + 1] : dflt
}
const round = (x, d = 3) => (x === null || x === undefined || !Number.isFinite(x) ? null : Number(x.toFixed(d)))

async function scrape(port) {
  const text = await (await fetch(`http://127.0.0.1:${port}/metrics`)).text()
  const get = (name) => Number((text.match(new RegExp(`^${name} (\\S+)$`, 'm')) || [])[1] ?? NaN)
  return {
    encoded: get('pinhole_images_encoded_total'), prefilled: get('pinhole_prompt_tokens_prefilled_total'),
    shared_pictures: get('pinhole_image_cache_shared_hits_total') || 0,
    shared_records: get('pinhole_disk_cache_shared_records_total') || 0,
  }
}
const sum = (xs, k) => xs.reduce((a, x) => a + x[k], 0)

async function turn(url, model, messages, session, tokens) {
  const t0 = performance.now()
  const res = await fetch(`${url}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...(session ? { 'X-Pinhole-Session': session } : {}) },
    body: JSON.stringify({ model, messages, max_tokens: tokens, temperature: 0, stream: true,
                           stream_options: { include_usage: true } }),
  })
  if (!res.ok) throw new Error(`HTTP ${res.status}: ${(await res.text()).slice(0, 300)}`)
  const replica = res.headers.get('x-pinhole-replica')
  let first = null, text = '', usage = null, pending = ''
  const dec = new TextDecoder()
  for await (const chunk of res.body) {
    const now = performance.now()
    pending += dec.decode(chunk, { stream: true })
    let nl
    while ((nl = pending.indexOf('\n')) >= 0) {
      const line = pending.slice(0, nl).trim()
      pending = pending.slice(nl + 1)
      if (!line.startsWith('data:') || line === 'data: [DONE]') continue
      const j = JSON.parse(line.slice(5))
      if (j.usage) usage = j.usage
      const d = j.choices?.[0]?.delta
      if ((d?.content || d?.reasoning_content) && first === null) first = now
      text += d?.content || ''
    }
  }
  const end = performance.now()
  return { ttft: ((first ?? end) - t0) / 1000, text, usage, replica }
}

async function phase() {
  const url = opt('url'), ports = opt('replicas').split(','), dir = opt('pictures'), stateFile = opt('state')
  const turns = opt('turns').split(',').map(Number), config = opt('config'), session = opt('session', 'on') === 'on'
  const n = Number(opt('conversations', 24)), tokens = Number(opt('tokens', 8))
  const pics = fs.readdirSync(dir).filter((f) => f.endsWith('.png')).sort()
  const convs = fs.existsSync(stateFile) ? JSON.parse(fs.readFileSync(stateFile, 'utf8')) : []
  const questions = ['What is in this picture?', 'Tell me more about its colours.', 'And its shapes?', 'Sum it up in a line.']
  const model = (await (await fetch(`${url}/v1/models`)).json()).data[0].id
  const before = await Promise.all(ports.map(scrape))
  for (const t of turns) {
    for (let c = 0; c < n; c++) {
      if (t === 1) {
        const pic = fs.readFileSync(path.join(dir, pics[c % pics.length])).toString('base64')
        convs[c] = [{ role: 'system', content: 'You are a careful assistant who describes pictures.' },
          { role: 'user', content: [{ type: 'image_url', image_url: { url: `data:image/png;base64,${pic}` } },
            { type: 'text', text: `${questions[0]} (conversation ${c})` }] }]
      } else {
        convs[c].push({ role: 'user', content: questions[(t - 1) % questions.length] })
      }
      const r = await turn(url, model, convs[c], session ? `conv-${c}` : null, tokens)
      convs[c].push({ role: 'assistant', content: r.text })
      process.stdout.write(JSON.stringify({ kind: 'turn', config, conversation: c, picture: c % pics.length, turn: t,
        ttft_s: round(r.ttft), prompt: r.usage?.prompt_tokens ?? null,
        cached: r.usage?.prompt_tokens_details?.cached_tokens ?? null, replica: r.replica }) + '\n')
    }
  }
  const after = await Promise.all(ports.map(scrape))
  fs.writeFileSync(stateFile, JSON.stringify(convs))
  const d = (k) => sum(after, k) - sum(before, k)
  process.stdout.write(JSON.stringify({ kind: 'phase', config, turns, encoded: d('encoded'), prefilled: d('prefilled'),
    shared_pictures: d('shared_pictures'), shared_records: d('shared_records') }) + '\n')
}

function table() {
  const rows = fs.readFileSync(args[1], 'utf8').trim().split('\n').map((l) => JSON.parse(l))
  const meta = rows.find((r) => r.kind === 'meta') || {}
  const q = (xs, p) => {
    const s = [...xs].sort((a, b) => a - b)
    return s.length ? s[Math.min(s.length - 1, Math.floor(p * s.length))] : null
  }
  const f = (x, d = 2) => (x === null || x === undefined ? '-' : x.toFixed(d))
  const names = {
    rr: '(a) round robin, no shared tier', affinity: '(b) HAProxy affinity, no shared tier',
    shared: '(c) affinity + shared tier', never: 'affinity + shared tier, no restart (reference)',
  }
  let s = `${meta.conversations ?? '?'} conversations of ${meta.turns ?? 4} turns over ${meta.pictures ?? '?'} distinct ` +
    `${meta.size ?? ''} pictures, ${meta.replicas ?? 3} replicas; between turn 1 and turn 2 every replica is killed ` +
    '(SIGKILL) and started again with its caches emptied (`restart K --kill --fresh`), but for the reference.\n\n' +
    '| configuration | pictures encoded | rows prefilled | TTFT median s | TTFT p95 s | turns 2-4 median s | turns 2-4 p95 s | pictures from the shared tier | block records from it |\n' +
    '|---|---|---|---|---|---|---|---|---|\n'
  const med = {}
  for (const c of ['rr', 'affinity', 'shared', 'never']) {
    const ts = rows.filter((r) => r.kind === 'turn' && r.config === c)
    if (!ts.length) continue
    const ph = rows.filter((r) => r.kind === 'phase' && r.config === c)
    const all = ts.map((r) => r.ttft_s), late = ts.filter((r) => r.turn > 1).map((r) => r.ttft_s)
    med[c] = q(late, 0.5)
    s += `| ${names[c]} | ${sum(ph, 'encoded')} | ${sum(ph, 'prefilled')} | ${f(q(all, 0.5))} | ${f(q(all, 0.95))} | ` +
      `${f(q(late, 0.5))} | ${f(q(late, 0.95))} | ${sum(ph, 'shared_pictures')} | ${sum(ph, 'shared_records')} |\n`
  }
  if (med.shared && med.never)
    s += `\nRestarted conversations' turns 2-4 against a cluster that never restarted (median): ${(med.shared / med.never).toFixed(2)}x.\n`
  process.stdout.write(s)
}

if (args[0] === 'phase') await phase()
else if (args[0] === 'table' && args[1]) table()
else {
  process.stderr.write('usage: node bench/cluster.mjs phase --url LB --replicas P,P,P --pictures DIR --state FILE ' +
    '--turns 1|2,3,4 --config NAME [--session on|off]\n       node bench/cluster.mjs table JSONL\n')
  process.exit(2)
}
