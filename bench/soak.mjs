#!/usr/bin/env node
// A soak test of `pinhole serve` (issue 13): many streaming clients for
// minutes, with random pictures and texts on all three APIs, mixed with
// abandoned requests, slow (trickling) connections and oversized pictures.
// Every answer is compared with the same request run alone first (greedy
// decoding: they must be equal). Reports errors, mismatches, latency
// percentiles and the server's memory over time. Not part of CI.
//
//   node bench/soak.mjs [--minutes 10] [--clients 16] [--bin build/pinhole]
//                       [--model M.gguf --mmproj P.gguf] [--out FILE.json]
//
// Defaults: the oracle's tiny model (../shared/oracle/models/tiny-f16*),
// so that the server, not the model, is what is exercised.
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import zlib from 'node:zlib';

const here = path.dirname(new URL(import.meta.url).pathname);
const root = path.resolve(here, '..');
const arg = (name, def) => {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 && i + 1 < process.argv.length ? process.argv[i + 1] : def;
};
const MINUTES = Number(arg('minutes', 10));
const CLIENTS = Number(arg('clients', 16));
const BIN = path.resolve(arg('bin', path.join(root, 'build/pinhole')));
const ORACLE = process.env.PH_ORACLE_DIR || path.resolve(root, '../shared/oracle');
const MODEL = arg('model', path.join(ORACLE, 'models/tiny-f16.gguf'));
const MMPROJ = arg('mmproj', path.join(ORACLE, 'models/tiny-f16-mmproj.gguf'));
const OUT = arg('out', '');

// ---- a deterministic random source and pictures -------------------------------
let seed = 12345;
const rnd = () => ((seed = (seed * 1103515245 + 12345) >>> 0) / 2 ** 32);
const pick = (a) => a[Math.floor(rnd() * a.length)];

const crcTable = Array.from({ length: 256 }, (_, n) => {
  let c = n;
  for (let k = 0; k < 8; k++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1;
  return c >>> 0;
});
function crc32(buf) {
  let c = 0xffffffff;
  for (const b of buf) c = crcTable[(c ^ b) & 0xff] ^ (c >>> 8);
  return (c ^ 0xffffffff) >>> 0;
}
function chunk(type, data) {
  const len = Buffer.alloc(4);
  len.writeUInt32BE(data.length);
  const td = Buffer.concat([Buffer.from(type, 'latin1'), data]);
  const crc = Buffer.alloc(4);
  crc.writeUInt32BE(crc32(td));
  return Buffer.concat([len, td, crc]);
}
// An RGB PNG; fill(x, y) gives [r, g, b] (null: all zero, made row by row).
function png(w, h, fill) {
  const ihdr = Buffer.alloc(13);
  ihdr.writeUInt32BE(w, 0);
  ihdr.writeUInt32BE(h, 4);
  ihdr[8] = 8; ihdr[9] = 2;
  const raw = Buffer.alloc((w * 3 + 1) * h);
  if (fill) {
    for (let y = 0; y < h; y++)
      for (let x = 0; x < w; x++) {
        const [r, g, b] = fill(x, y);
        const o = y * (w * 3 + 1) + 1 + x * 3;
        raw[o] = r; raw[o + 1] = g; raw[o + 2] = b;
      }
  }
  return Buffer.concat([Buffer.from([137, 80, 78, 71, 13, 10, 26, 10]), chunk('IHDR', ihdr),
    chunk('IDAT', zlib.deflateSync(raw, { level: 9 })), chunk('IEND', Buffer.alloc(0))]);
}
function randomPicture() {
  const w = 32 + Math.floor(rnd() * 600), h = 32 + Math.floor(rnd() * 600);
  const a = Math.floor(rnd() * 256), b = Math.floor(rnd() * 256), k = 1 + Math.floor(rnd() * 15);
  return png(w, h, (x, y) => [(x * k + a) & 255, (y * k + b) & 255, ((x ^ y) * k) & 255]);
}

// ---- the three APIs, streamed ----------------------------------------------------
const TEXTS = ['Describe this.', 'What colours are there?', 'Count to ten.', 'Write a haiku about rivers.',
  'Explain recursion briefly.', 'Name three birds.', 'What is 17 times 23?', 'Say something kind.'];

function body(kind, req) {
  const b64 = req.picture?.toString('base64');
  if (kind === 'chat') {
    const content = [{ type: 'text', text: req.text }];
    if (b64) content.unshift({ type: 'image_url', image_url: { url: `data:image/png;base64,${b64}` } });
    return { path: '/v1/chat/completions', json: { messages: [{ role: 'user', content }], max_tokens: req.n, temperature: 0, stream: true } };
  }
  if (kind === 'responses') {
    const content = [{ type: 'input_text', text: req.text }];
    if (b64) content.unshift({ type: 'input_image', image_url: `data:image/png;base64,${b64}` });
    return { path: '/v1/responses', json: { input: [{ role: 'user', content }], max_output_tokens: req.n, temperature: 0, stream: true } };
  }
  const content = [{ type: 'text', text: req.text }];
  if (b64) content.unshift({ type: 'image', source: { type: 'base64', media_type: 'image/png', data: b64 } });
  return { path: '/v1/messages', json: { messages: [{ role: 'user', content }], max_tokens: req.n, temperature: 0, stream: true } };
}

// Parses an SSE body into {text, error}.
function readSse(kind, raw) {
  let text = '';
  let error = null;
  for (const block of raw.split('\n\n')) {
    let ev = null;
    let data = null;
    for (const line of block.split('\n')) {
      if (line.startsWith('event: ')) ev = line.slice(7);
      else if (line.startsWith('data: ')) data = line.slice(6);
    }
    if (!data || data === '[DONE]') continue;
    let j;
    try { j = JSON.parse(data); } catch { error = `bad JSON in the stream: ${data.slice(0, 80)}`; continue; }
    if (j.error || ev === 'error' || ev === 'response.failed') error = JSON.stringify(j.error ?? j).slice(0, 200);
    else if (kind === 'chat') text += j.choices?.[0]?.delta?.content ?? '';
    else if (kind === 'responses' && ev === 'response.output_text.delta') text += j.delta;
    else if (kind === 'messages' && ev === 'content_block_delta' && j.delta?.type === 'text_delta') text += j.delta.text;
  }
  return { text, error };
}

async function run(url, kind, req, signal) {
  const { path: p, json } = body(kind, req);
  const t0 = performance.now();
  const r = await fetch(url + p, { method: 'POST', signal, headers: { 'content-type': 'application/json' }, body: JSON.stringify(json) });
  if (r.status !== 200) return { status: r.status, error: (await r.text()).slice(0, 200), ms: performance.now() - t0 };
  const reader = r.body.getReader();
  const dec = new TextDecoder();
  let raw = '';
  let ttft = null;
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    if (ttft === null) ttft = performance.now() - t0;
    raw += dec.decode(value, { stream: true });
  }
  return { status: 200, ...readSse(kind, raw), ms: performance.now() - t0, ttft };
}

// ---- the server ------------------------------------------------------------------
async function start() {
  const cache = fs.mkdtempSync(path.join(os.tmpdir(), 'pinhole-soak-'));
  const env = { ...process.env, XDG_CACHE_HOME: cache };
  delete env.PINHOLE_API_KEY;
  const proc = spawn(BIN, ['serve', '-m', MODEL, '--mmproj', MMPROJ, '--port', '0', '-t', '2'], {
    stdio: ['ignore', 'ignore', 'pipe'], env,
  });
  let err = '';
  proc.stderr.setEncoding('utf8');
  const port = await new Promise((resolve, reject) => {
    proc.stderr.on('data', (d) => {
      err += d;
      if (err.length > 1 << 20) err = err.slice(-(1 << 19));
      const m = /listening on http:\/\/127\.0\.0\.1:(\d+)/.exec(err);
      if (m) resolve(Number(m[1]));
    });
    proc.on('exit', (c) => reject(new Error(`the server exited (${c}):\n${err}`)));
  });
  return { proc, url: `http://127.0.0.1:${port}`, port, cache };
}

function procStatus(pid) {
  const s = fs.readFileSync(`/proc/${pid}/status`, 'utf8');
  const kb = (k) => Number(new RegExp(`^${k}:\\s+(\\d+)`, 'm').exec(s)?.[1] ?? 0);
  return { rss_mb: kb('VmRSS') / 1024, hwm_mb: kb('VmHWM') / 1024, threads: kb('Threads') };
}

async function metric(url, name) {
  const t = await (await fetch(`${url}/metrics`)).text();
  return t.split('\n').filter((l) => l.startsWith(name + ' ') || l.startsWith(name + '{'))
    .reduce((a, l) => a + Number(l.split(' ').pop()), 0);
}

const pct = (a, p) => {
  if (!a.length) return null;
  const s = [...a].sort((x, y) => x - y);
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))];
};

// ---- the soak --------------------------------------------------------------------
async function main() {
  const srv = await start();
  const kinds = ['chat', 'responses', 'messages'];
  const pictures = Array.from({ length: 8 }, randomPicture);
  const pool = Array.from({ length: 24 }, (_, i) => ({
    kind: kinds[i % 3], text: pick(TEXTS), n: 16 + Math.floor(rnd() * 48), picture: rnd() < 0.66 ? pick(pictures) : null,
  }));
  process.stderr.write(`soak: ${CLIENTS} clients for ${MINUTES} min against ${srv.url}; reference answers of ${pool.length} requests alone...\n`);
  for (const req of pool) {
    const r = await run(srv.url, req.kind, req);
    if (r.status !== 200 || r.error) throw new Error(`reference request failed: ${r.status} ${r.error}`);
    req.ref = r.text;
  }
  const start0 = procStatus(srv.proc.pid);
  const stats = { done: 0, errors: [], mismatches: 0, abandoned: 0, slow_opened: 0, oversized: 0, oversized_bad: [], lat: [], ttft: [] };
  const samples = [];
  const until = Date.now() + MINUTES * 60_000;
  const t0 = Date.now();
  const sampler = setInterval(() => {
    try { samples.push({ t_s: Math.round((Date.now() - t0) / 1000), ...procStatus(srv.proc.pid) }); } catch { /* exited */ }
  }, 5000);

  async function client() {
    while (Date.now() < until) {
      const req = pick(pool);
      if (rnd() < 0.1) { // abandoned: the client leaves mid-answer
        const ac = new AbortController();
        setTimeout(() => ac.abort(), 50 + rnd() * 500);
        await run(srv.url, req.kind, req, ac.signal).catch(() => {});
        stats.abandoned++;
        continue;
      }
      try {
        const r = await run(srv.url, req.kind, req);
        if (r.status !== 200 || r.error) stats.errors.push(`${req.kind}: ${r.status} ${r.error}`);
        else {
          stats.done++;
          stats.lat.push(r.ms);
          stats.ttft.push(r.ttft);
          if (r.text !== req.ref) stats.mismatches++;
        }
      } catch (e) {
        stats.errors.push(`${req.kind}: ${e.message}`);
      }
    }
  }
  async function slowConnections() { // bursts of trickling connections, closed by the head's deadline
    while (Date.now() < until) {
      for (let i = 0; i < 20; i++) {
        const s = net.connect({ port: srv.port, host: '127.0.0.1' }, () => s.write('POST /v1/chat/completions HTTP/1.1\r\nHost: localhost\r\n'));
        const timer = setInterval(() => { if (!s.destroyed) s.write('x'); }, 1000);
        s.on('error', () => {});
        s.on('close', () => clearInterval(timer));
        setTimeout(() => s.destroy(), 30_000).unref();
        stats.slow_opened++;
      }
      await new Promise((r) => setTimeout(r, 2000));
    }
  }
  const huge = png(8192, 8192, null);
  async function oversized() { // pictures whose rows cannot fit the context: refused with 400
    while (Date.now() < until) {
      await new Promise((r) => setTimeout(r, 10_000));
      const r = await run(srv.url, 'chat', { text: 'What is this?', n: 8, picture: huge }).catch((e) => ({ status: 0, error: e.message }));
      stats.oversized++;
      if (r.status !== 400) stats.oversized_bad.push(`${r.status} ${r.error ?? ''}`.slice(0, 200));
    }
  }
  await Promise.all([...Array.from({ length: CLIENTS }, client), slowConnections(), oversized()]);
  clearInterval(sampler);
  const end = procStatus(srv.proc.pid);
  const m = {};
  for (const k of ['pinhole_requests_cancelled_total', 'pinhole_connections_deadline_closed_total',
    'pinhole_connections_limit_closed_total', 'pinhole_connections_refused_total', 'pinhole_images_encoded_total',
    'pinhole_image_cache_hits_total', 'pinhole_prompt_tokens_reused_total', 'pinhole_prompt_tokens_prefilled_total'])
    m[k] = await metric(srv.url, k);
  srv.proc.kill('SIGTERM');
  await new Promise((r) => srv.proc.on('exit', r));
  fs.rmSync(srv.cache, { recursive: true, force: true });
  const report = {
    date: new Date().toISOString(), minutes: MINUTES, clients: CLIENTS, model: path.basename(MODEL), cpu: os.cpus()[0]?.model,
    answered: stats.done, errors: stats.errors.length, first_errors: stats.errors.slice(0, 5), mismatches: stats.mismatches,
    abandoned: stats.abandoned, slow_connections: stats.slow_opened, oversized: stats.oversized,
    oversized_not_400: stats.oversized_bad,
    latency_ms: { p50: pct(stats.lat, 50), p90: pct(stats.lat, 90), p99: pct(stats.lat, 99), max: pct(stats.lat, 100) },
    ttft_ms: { p50: pct(stats.ttft, 50), p90: pct(stats.ttft, 90), p99: pct(stats.ttft, 99) },
    rss_mb: { after_references: start0.rss_mb, min: Math.min(...samples.map((s) => s.rss_mb)),
      max: Math.max(...samples.map((s) => s.rss_mb)), end: end.rss_mb, peak_hwm: end.hwm_mb },
    threads: { start: start0.threads, max: Math.max(...samples.map((s) => s.threads)) },
    metrics: m, samples,
  };
  const txt = JSON.stringify(report, null, 1);
  if (OUT) fs.writeFileSync(OUT, txt + '\n');
  const { samples: _, ...brief } = report;
  process.stdout.write(JSON.stringify(brief, null, 1) + '\n');
  const ok = report.errors === 0 && report.mismatches === 0 && report.oversized_not_400.length === 0;
  process.exit(ok ? 0 : 1);
}

main().catch((e) => { process.stderr.write(`soak: ${e.stack || e}\n`); process.exit(2); });
