// Picture memory (issue 13, item 1): the HTTP threads only fingerprint a
// picture and read its header (size, orientation), so a request whose
// pictures cannot fit the context is refused before anything is decoded,
// a queued picture holds its compressed bytes only, and the pictures of
// the queued and running requests are bounded by --max-pixels-in-flight
// (past it 503 with Retry-After; a request over it alone 400).
//
// The pictures are all-zero PNGs made here, 8192x8192 in about 196 KB: one
// decoded is 8192 * 8192 * 3 bytes = 192 MiB, so a peak RSS (VmHWM) that
// stays under PEAK_MIB above the RSS after startup shows that none was. The
// requests themselves (1 MB bodies, their JSON and base64-decoded copies,
// the connection threads) take a few MiB each. Last, a PNG larger than
// 8 MiB is taken in every API.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { crc32, deflateSync } from 'node:zlib';
import { after, before, describe, test } from 'node:test';

import { MODEL_ID, SANITIZED, metric, sleep, startServer, stopServer, waitMetrics } from './helpers.mjs';

const PEAK_MIB = 128;

// A PNG chunk: length, type, data, CRC over type and data.
function chunk(type, data) {
  const b = Buffer.alloc(12 + data.length);
  b.writeUInt32BE(data.length, 0);
  b.write(type, 4, 'latin1');
  data.copy(b, 8);
  b.writeUInt32BE(crc32(b.subarray(4, 8 + data.length)), 8 + data.length);
  return b;
}

// An all-zero RGB8 PNG of w x h (each row a filter byte and 3w zeros, in
// one IDAT). Pictures of one size share the IDAT; a tEXt chunk numbered
// `tag` makes each file's bytes (its bytes_id) its own, so that a server
// that decodes pictures would decode every one of them.
const idats = new Map();
function zeroPng(w, h, tag) {
  const key = `${w}x${h}`;
  if (!idats.has(key)) idats.set(key, chunk('IDAT', deflateSync(Buffer.alloc((1 + 3 * w) * h), { level: 9 })));
  return rgbPng(w, h, chunk('tEXt', Buffer.from(`Comment\0picture ${tag}`, 'latin1')), idats.get(key));
}

// An RGB8 PNG of w x h: its signature, IHDR, these chunks, IEND.
function rgbPng(w, h, ...chunks) {
  const ihdr = Buffer.alloc(13);
  ihdr.writeUInt32BE(w, 0);
  ihdr.writeUInt32BE(h, 4);
  ihdr[8] = 8; // bit depth
  ihdr[9] = 2; // RGB
  return Buffer.concat([Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]), chunk('IHDR', ihdr), ...chunks,
                        chunk('IEND', Buffer.alloc(0))]);
}

const b64 = (png) => png.toString('base64');
let tags = 0;
const pictures = (n, w, h) => Array.from({ length: n }, () => b64(zeroPng(w, h, tags++)));

// A request with these pictures (base64 PNGs) in each API's shape.
function body(api, pics, extra = {}) {
  const text = { chat: { type: 'text', text: 'What is in these pictures?' },
                 responses: { type: 'input_text', text: 'What is in these pictures?' },
                 messages: { type: 'text', text: 'What is in these pictures?' } }[api];
  const parts = pics.map((p) => ({
    chat: { type: 'image_url', image_url: { url: `data:image/png;base64,${p}` } },
    responses: { type: 'input_image', image_url: `data:image/png;base64,${p}` },
    messages: { type: 'image', source: { type: 'base64', media_type: 'image/png', data: p } },
  }[api]));
  const content = [text, ...parts];
  if (api === 'responses') return { model: MODEL_ID, input: [{ type: 'message', role: 'user', content }], max_output_tokens: 4, ...extra };
  return { model: MODEL_ID, messages: [{ role: 'user', content }], max_tokens: 4, temperature: 0, ...extra };
}
const PATH = { chat: '/v1/chat/completions', responses: '/v1/responses', messages: '/v1/messages' };

function send(srv, api, pics, { signal, extra, path } = {}) {
  return fetch(srv.url + (path ?? PATH[api]), {
    method: 'POST', signal, headers: { 'content-type': 'application/json' }, body: JSON.stringify(body(api, pics, extra)),
  });
}

async function answer(r) {
  return { status: r.status, retryAfter: r.headers.get('retry-after'), json: await r.json() };
}

// The error message in either shape.
const message = (json) => json?.error?.message ?? '';

// VmRSS and VmHWM (the peak RSS) of the server, in MiB.
function memory(srv) {
  const status = readFileSync(`/proc/${srv.proc.pid}/status`, 'utf8');
  const kib = (name) => Number(new RegExp(`^${name}:\\s+(\\d+) kB`, 'm').exec(status)[1]);
  return { rss: kib('VmRSS') / 1024, hwm: kib('VmHWM') / 1024 };
}

function checkPeak(t, srv, base, what) {
  const { hwm } = memory(srv);
  t.diagnostic(`${what}: peak RSS ${hwm.toFixed(0)} MiB (after startup: RSS ${base.rss.toFixed(0)} MiB, peak ${base.hwm.toFixed(0)} MiB)`);
  if (SANITIZED) return; // AddressSanitizer's shadow and quarantine: the figures are its own
  assert.ok(hwm < base.rss + PEAK_MIB,
            `${what}: the peak RSS reached ${hwm.toFixed(0)} MiB, more than ${PEAK_MIB} MiB over the ${base.rss.toFixed(0)} MiB ` +
            'after startup: a picture was decoded');
}

// A long streamed answer: the worker is busy until stop().
async function busyWorker(srv) {
  const ac = new AbortController();
  const r = await fetch(`${srv.url}/v1/chat/completions`, {
    method: 'POST', signal: ac.signal, headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: MODEL_ID, messages: [{ role: 'user', content: 'Write a very long essay about rivers.' }],
                           max_tokens: 100000, temperature: 0, stream: true }),
  });
  const reader = r.body.getReader();
  await reader.read();
  return { stop: () => { ac.abort(); reader.cancel().catch(() => {}); } };
}

const swallow = (p) => p.catch((e) => { if (e.name !== 'AbortError') throw e; });
const queued = (srv, n) => waitMetrics(srv, (s) => metric(s, 'pinhole_queue_length') === n, 10_000);

describe('pictures too large for the context', { timeout: 300_000 }, () => {
  let srv, base;
  before(async () => {
    // the model's context: 4096; an 8192x8192 picture takes at most half of it (45 x 45 = 2025 rows), so two fit
    // and the third does not
    srv = await startServer();
    base = memory(srv);
  });
  after(() => stopServer(srv));

  test('four 8192x8192 pictures: 400 before any is decoded', async (t) => {
    const r = await answer(await send(srv, 'chat', pictures(4, 8192, 8192)));
    assert.equal(r.status, 400);
    assert.match(message(r.json), /^picture 3 \(2025 tokens\) does not fit: the prompt through it is at least 6075 tokens long \(its pictures alone\) but the context holds 4096/);
    checkPeak(t, srv, base, 'one request');
  });

  test('three such requests at once, one per API: 400 each, in its shape', async (t) => {
    const rs = await Promise.all(['chat', 'responses', 'messages'].map(async (api) => [api, await answer(await send(srv, api, pictures(4, 8192, 8192)))]));
    for (const [api, r] of rs) {
      assert.equal(r.status, 400, api);
      assert.match(message(r.json), /context holds 4096 \(and needs room for the answer\)/, api);
      if (api === 'messages') assert.equal(r.json.type, 'error', 'Anthropic\'s error shape');
      assert.equal(r.json.error.type, 'invalid_request_error', api);
    }
    checkPeak(t, srv, base, 'three requests at once');
  });

  test('counting their tokens is not refused and decodes nothing', async (t) => {
    const r = await answer(await send(srv, 'messages', pictures(4, 8192, 8192), { path: '/v1/messages/count_tokens', extra: { max_tokens: undefined } }));
    assert.equal(r.status, 200, JSON.stringify(r.json));
    assert.ok(r.json.input_tokens > 4 * 2025, `input_tokens ${r.json.input_tokens}`);
    checkPeak(t, srv, base, 'count_tokens');
  });
});

describe('a queued picture', { timeout: 300_000 }, () => {
  let srv, base;
  before(async () => {
    // one worker, kept busy: the picture request waits in the queue
    srv = await startServer({ extra: ['--image-max-tokens', '64', '--parallel', '1'] }); // an 8192x8192 picture fits: 64 rows
    base = memory(srv);
  });
  after(() => stopServer(srv));

  test('holds only its compressed bytes, and is never decoded once its client has left', async (t) => {
    const busy = await busyWorker(srv);
    const ac = new AbortController();
    const waiting = swallow(send(srv, 'chat', pictures(1, 8192, 8192), { signal: ac.signal }));
    await queued(srv, 1);
    await sleep(500);
    checkPeak(t, srv, base, 'queued');
    ac.abort();
    await waiting;
    await sleep(600); // the server notices within 0.2 s
    busy.stop();
    const s = await waitMetrics(srv, (s) => metric(s, 'pinhole_queue_length') === 0 &&
                                            metric(s, 'pinhole_requests_cancelled_total') >= 2, 10_000);
    assert.equal(metric(s, 'pinhole_requests_cancelled_total'), 2, 'the stream and the queued request were cancelled');
    await sleep(500);
    checkPeak(t, srv, base, 'skipped');
  });
});

describe('--max-pixels-in-flight', { timeout: 300_000 }, () => {
  let srv;
  // one worker, kept busy: the picture requests wait in the queue
  before(async () => { srv = await startServer({ extra: ['--max-pixels-in-flight', '1000000', '--parallel', '1'] }); });
  after(() => stopServer(srv));

  test('past it 503 with Retry-After, in each API\'s shape; a request over it alone 400; counted out when done', async () => {
    const busy = await busyWorker(srv);
    const ac = new AbortController();
    const first = swallow(send(srv, 'chat', pictures(1, 800, 800), { signal: ac.signal })); // 640000 pixels
    await queued(srv, 1);
    const t0 = performance.now();
    const chat = await answer(await send(srv, 'chat', pictures(1, 800, 800)));
    assert.equal(chat.status, 503, JSON.stringify(chat.json));
    assert.equal(chat.retryAfter, '1');
    assert.match(message(chat.json), /640000 pixels would pass --max-pixels-in-flight \(1000000\)/);
    assert.equal(chat.json.error.type, 'server_error');
    const msgs = await answer(await send(srv, 'messages', pictures(1, 800, 800)));
    assert.equal(msgs.status, 503);
    assert.equal(msgs.retryAfter, '1');
    assert.equal(msgs.json.type, 'error');
    assert.equal(msgs.json.error.type, 'overloaded_error');
    assert.ok(performance.now() - t0 < 5000, 'refused without waiting');

    const alone = await answer(await send(srv, 'responses', pictures(1, 1100, 1000)));
    assert.equal(alone.status, 400);
    assert.match(message(alone.json), /^the request's pictures are 1100000 pixels in all, more than the 1000000 .*\(--max-pixels-in-flight\)/);

    ac.abort();
    await first;
    await sleep(600);
    busy.stop();
    await queued(srv, 0);
    const ok = await answer(await send(srv, 'chat', pictures(1, 800, 800)));
    assert.equal(ok.status, 200, JSON.stringify(ok.json));
    const again = await answer(await send(srv, 'messages', pictures(1, 800, 800)));
    assert.equal(again.status, 200, 'the pictures of the request before were counted out');
  });
});

// A PNG larger than 8 MiB (issue 23): 1800x1800 RGB noise, stored (deflate
// level 0), 9.7 MB as a file, as a 4K screenshot may be. libspng used to
// refuse every PNG over 8 MiB as corrupt; pictures up to the 64 MiB file
// limit are taken in every API.
function noisePng(w, h) {
  const raw = Buffer.alloc((1 + 3 * w) * h);
  let x = 2463534242;
  for (let i = 0; i < raw.length; i++) {
    x ^= x << 13; x ^= x >>> 17; x ^= x << 5;
    raw[i] = i % (1 + 3 * w) === 0 ? 0 : x & 0xff; // each row: filter byte 0, then its samples
  }
  return rgbPng(w, h, chunk('IDAT', deflateSync(raw, { level: 0 })));
}

describe('a PNG over 8 MiB', { timeout: 300_000 }, () => {
  let srv;
  before(async () => { srv = await startServer({ extra: ['--image-max-tokens', '64'] }); });
  after(() => stopServer(srv));

  test('is decoded in each API', async () => {
    const png = noisePng(1800, 1800);
    assert.ok(png.length > 9 << 20, `${png.length} bytes`);
    for (const api of ['chat', 'responses', 'messages']) {
      const r = await answer(await send(srv, api, [b64(png)]));
      assert.equal(r.status, 200, `${api}: ${JSON.stringify(r.json)}`);
    }
  });
});
