// /health, /v1/models, /metrics (the KV pool's blocks by state among them), unknown paths, SSE framing, and the
// server's life: it starts on a free port and stops cleanly on SIGINT and
// SIGTERM.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';

import {
  anthropic, chatResult, get, img, metric, metrics, MODEL_ID, openai, post, startServer, stopServer, toChat, user,
} from './helpers.mjs';

const COUNTERS = [
  'pinhole_prompt_tokens_total', 'pinhole_generated_tokens_total', 'pinhole_requests_queued_total', 'pinhole_requests_cancelled_total',
  'pinhole_prompt_tokens_reused_total', 'pinhole_prompt_tokens_prefilled_total', 'pinhole_image_cache_hits_total',
  'pinhole_image_cache_misses_total', 'pinhole_image_cache_evictions_total', 'pinhole_images_encoded_total',
  'pinhole_encoder_loads_total', 'pinhole_encoder_unloads_total',
];

// Reads an SSE body: [{event, data}] (data parsed as JSON unless [DONE]).
async function sse(srv, path, body) {
  const r = await fetch(srv.url + path, {
    method: 'POST', headers: { 'content-type': 'application/json', 'x-api-key': 'unused' }, body: JSON.stringify(body),
  });
  assert.equal(r.status, 200);
  assert.match(r.headers.get('content-type') ?? '', /^text\/event-stream/);
  const text = await r.text();
  assert.ok(text.endsWith('\n\n'), 'the stream ends with a complete event');
  const out = [];
  for (const block of text.split('\n\n').filter((b) => b.trim())) {
    let event = null;
    const data = [];
    for (const line of block.split('\n')) {
      if (line.startsWith(':')) continue; // comment (keep-alive)
      const m = /^([a-z]+): ?(.*)$/.exec(line);
      assert.ok(m, `SSE line: ${JSON.stringify(line)}`);
      if (m[1] === 'event') event = m[2];
      else if (m[1] === 'data') data.push(m[2]);
    }
    if (!data.length) continue;
    const d = data.join('\n');
    out.push({ event, data: d === '[DONE]' ? d : JSON.parse(d) });
  }
  return out;
}

describe('endpoints', { timeout: 300_000 }, () => {
  let srv;
  before(async () => { srv = await startServer(); });
  after(() => stopServer(srv));

  test('GET /health', async () => {
    const r = await get(srv, '/health');
    assert.equal(r.status, 200);
    assert.match(r.type, /^application\/json/);
    assert.deepEqual(JSON.parse(r.text), { status: 'ok' });
  });

  test('GET /v1/models lists the model', async () => {
    const page = await openai(srv).models.list();
    assert.equal(page.data.length, 1);
    const m = page.data[0];
    assert.equal(m.id, MODEL_ID);
    assert.equal(m.object, 'model');
    assert.equal(typeof m.created, 'number');
    assert.equal(typeof m.owned_by, 'string');
    const raw = JSON.parse((await get(srv, '/v1/models')).text);
    assert.equal(raw.object, 'list');
  });

  test('unknown paths are 404', async () => {
    // (GET / is the web chat page: webchat.test.mjs)
    for (const [method, path] of [['GET', '/v1/nothing'], ['POST', '/v1/chat/nothing'], ['POST', '/'], ['GET', '/index.htm'],
                                  ['POST', '/v2/messages']]) {
      const r = await fetch(srv.url + path, method === 'POST' ? { method, body: '{}', headers: { 'content-type': 'application/json' } } : {});
      assert.equal(r.status, 404, `${method} ${path}`);
      await r.text();
    }
    const an = anthropic(srv);
    let err = null;
    try { await an.models.retrieve('no-such-model-anywhere'); } catch (e) { err = e; }
    assert.ok(err, 'GET /v1/models/... of an unknown model fails');
    assert.equal(err.status, 404);
  });

  test('GET /metrics: Prometheus text with every series', async () => {
    const r = await get(srv, '/metrics');
    assert.equal(r.status, 200);
    assert.match(r.type, /^text\/plain/);
    // a request of each endpoint first, so the labelled series exist
    await openai(srv).chat.completions.create({ model: MODEL_ID, messages: [{ role: 'user', content: 'hi' }], max_tokens: 2 });
    const s = await metrics(srv);
    for (const name of [...COUNTERS, 'pinhole_queue_length']) {
      const v = metric(s, name);
      assert.ok(v !== undefined, `${name} is missing`);
      assert.ok(v >= 0, `${name} = ${v}`);
    }
    assert.equal(metric(s, 'pinhole_queue_length'), 0, 'nothing queued');
    assert.ok(metric(s, 'pinhole_requests_total', { endpoint: 'chat_completions', status: '200' }) >= 1);
    assert.ok(metric(s, 'pinhole_requests_total', { endpoint: 'metrics', status: '200' }) >= 1);
    // the histogram: cumulative buckets ending in +Inf = _count
    const buckets = s.filter((x) => x.name === 'pinhole_time_to_first_token_seconds_bucket');
    assert.ok(buckets.length >= 2, 'time to first token buckets');
    const les = buckets.map((b) => Number(b.labels.le === '+Inf' ? Infinity : b.labels.le));
    for (let i = 1; i < buckets.length; i++) {
      assert.ok(les[i] > les[i - 1], 'le increases');
      assert.ok(buckets[i].value >= buckets[i - 1].value, 'buckets are cumulative');
    }
    assert.equal(les.at(-1), Infinity);
    const count = metric(s, 'pinhole_time_to_first_token_seconds_count');
    assert.ok(count >= 1);
    assert.equal(buckets.at(-1).value, count);
    assert.ok(metric(s, 'pinhole_time_to_first_token_seconds_sum') >= 0);
    // the KV pool: its blocks by state add up to its size; the live answer holds some
    const block = metric(s, 'pinhole_kv_block_bytes'), pool = metric(s, 'pinhole_kv_pool_bytes');
    assert.ok(block > 0 && pool >= block, `a pool of ${pool} bytes in blocks of ${block}`);
    const states = ['in_use', 'cached', 'pinned', 'free'].map((state) => metric(s, 'pinhole_kv_blocks', { state }));
    assert.ok(states.every((n) => n >= 0), `blocks by state: ${states.join(' ')}`);
    assert.equal(states.reduce((a, n) => a + n, 0) * block, pool, 'the states add up to the pool');
    assert.ok(states[0] >= 1, 'the live conversation holds a block');
    for (const name of ['pinhole_kv_blocks_evicted_total', 'pinhole_kv_bytes_copied_total'])
      assert.ok(metric(s, name) >= 0, `${name} is missing`);
  });

  test('/metrics counts requests by endpoint and status, and tokens', async () => {
    const before = await metrics(srv);
    const oa = openai(srv);
    const r = chatResult(await oa.chat.completions.create({
      model: MODEL_ID, messages: [{ role: 'user', content: 'Count the requests.' }], max_tokens: 5, temperature: 0,
    }));
    await oa.responses.create({ model: MODEL_ID, input: 'one more', max_output_tokens: 2 });
    await anthropic(srv).messages.create({ model: MODEL_ID, max_tokens: 2, messages: [{ role: 'user', content: 'and one' }] });
    await oa.models.list();
    await get(srv, '/health');
    await get(srv, '/nowhere');
    await post(srv, '/v1/chat/completions', '{not json');
    const afterR = await metrics(srv);
    const d = (name, labels) => (metric(afterR, name, labels) ?? 0) - (metric(before, name, labels) ?? 0);
    const req = (endpoint, status) => d('pinhole_requests_total', { endpoint, status });
    assert.equal(req('chat_completions', '200'), 1);
    assert.equal(req('chat_completions', '400'), 1);
    assert.equal(req('responses', '200'), 1);
    assert.equal(req('messages', '200'), 1);
    assert.equal(req('models', '200'), 1);
    assert.equal(req('health', '200'), 1);
    assert.equal(req('other', '404'), 1);
    assert.equal(req('metrics', '200'), 1, 'the first scrape');
    assert.equal(d('pinhole_time_to_first_token_seconds_count'), 3);
    // the chat request alone, measured exactly
    const b2 = await metrics(srv);
    const r2 = chatResult(await oa.chat.completions.create({
      model: MODEL_ID, messages: [{ role: 'user', content: 'Count the tokens, please.' }], max_tokens: 5, temperature: 0,
    }));
    const a2 = await metrics(srv);
    const d2 = (name) => metric(a2, name) - metric(b2, name);
    assert.equal(d2('pinhole_prompt_tokens_total'), r2.prompt);
    assert.equal(d2('pinhole_generated_tokens_total'), r2.completion);
    assert.equal(d2('pinhole_prompt_tokens_reused_total'), r2.cached);
    assert.equal(d2('pinhole_prompt_tokens_reused_total') + d2('pinhole_prompt_tokens_prefilled_total'), r2.prompt);
    assert.ok(r.prompt > 0);
  });

  test('/metrics counts pictures: encoded once, then from the cache', async () => {
    const oa = openai(srv);
    const ask = (system) => oa.chat.completions.create({
      model: MODEL_ID, max_tokens: 2, temperature: 0,
      messages: toChat({ system, turns: [user(img('grad.png'), 'What is this?')] }),
    });
    const s0 = await metrics(srv);
    await ask('First.');
    const s1 = await metrics(srv);
    const d = (a, b, name) => metric(b, name) - metric(a, name);
    assert.equal(d(s0, s1, 'pinhole_images_encoded_total'), 1, 'a new picture is encoded');
    assert.equal(d(s0, s1, 'pinhole_image_cache_misses_total'), 1, 'a new picture misses the cache');
    // another system prompt: the live KV is not reused up to the picture, its embedding is
    await ask('Second, and different.');
    const s2 = await metrics(srv);
    assert.equal(d(s1, s2, 'pinhole_images_encoded_total'), 0, 'a known picture is not encoded again');
    assert.equal(d(s1, s2, 'pinhole_image_cache_hits_total'), 1, 'it is a cache hit');
  });

  test('SSE framing of the three streaming endpoints', async () => {
    const chat = await sse(srv, '/v1/chat/completions', {
      model: MODEL_ID, messages: [{ role: 'user', content: 'hi' }], max_tokens: 3, stream: true,
    });
    assert.equal(chat.at(-1).data, '[DONE]', 'chat completions end with data: [DONE]');
    for (const e of chat.slice(0, -1)) assert.equal(e.data.object, 'chat.completion.chunk');
    const resp = await sse(srv, '/v1/responses', { model: MODEL_ID, input: 'hi', max_output_tokens: 3, stream: true });
    for (const e of resp) assert.equal(e.event, e.data.type, 'responses: the event name is the type');
    const msgs = await sse(srv, '/v1/messages', {
      model: MODEL_ID, max_tokens: 3, stream: true, messages: [{ role: 'user', content: 'hi' }],
    });
    for (const e of msgs) assert.equal(e.event, e.data.type, 'messages: the event name is the type');
    assert.equal(msgs.at(-1).event, 'message_stop');
  });
});

describe('server life', { timeout: 120_000 }, () => {
  test('SIGINT stops it with status 0', async () => {
    const srv = await startServer();
    assert.equal((await get(srv, '/health')).status, 200);
    await stopServer(srv, 'SIGINT');
  });

  test('SIGTERM stops it with status 0, also during a stream', async () => {
    const srv = await startServer({ extra: ['-c', '4096'] });
    const stream = await openai(srv).chat.completions.create({
      model: MODEL_ID, messages: toChat({ turns: [user('Go on forever.')] }), max_tokens: 100000, stream: true,
    });
    const it = stream[Symbol.asyncIterator]();
    await it.next(); // the stream has started
    await stopServer(srv, 'SIGTERM');
    // the client sees the end of the stream, not a hang, and can tell the
    // answer was cut: the stream ends with an error event, which the SDK raises
    let error = null;
    try { for (;;) { const x = await it.next(); if (x.done) break; } } catch (e) { error = e; }
    assert.ok(error, 'the cut stream ended with an error, not as a complete answer');
    assert.match(String(error.message), /shutting down/);
  });

  test('SIGTERM during a stream: the raw stream ends with an error chunk, then [DONE]', async () => {
    const srv = await startServer({ extra: ['-c', '4096'] });
    const raw = async (path, body) => {
      const r = await fetch(srv.url + path, { method: 'POST', headers: { 'content-type': 'application/json' },
                                              body: JSON.stringify({ model: MODEL_ID, stream: true, max_tokens: 100000, ...body }) });
      const reader = r.body.getReader();
      const first = await reader.read();
      return { reader, text: new TextDecoder().decode(first.value) };
    };
    const s = await raw('/v1/chat/completions', { messages: [{ role: 'user', content: 'Go on forever.' }] });
    const stop = stopServer(srv, 'SIGTERM');
    let text = s.text;
    const dec = new TextDecoder();
    for (;;) {
      let x;
      try { x = await s.reader.read(); } catch { break; }
      if (x.done) break;
      text += dec.decode(x.value);
    }
    await stop;
    assert.match(text, /"error":\{[^}]*shutting down/, 'an OpenAI error chunk');
    assert.match(text, /data: \[DONE\]\s*$/, 'then [DONE]');
  });

  test('SIGTERM stops a server without a vision file too', async () => {
    const srv = await startServer({ vision: false });
    assert.equal((await openai(srv).models.list()).data[0].id, MODEL_ID);
    await stopServer(srv);
  });
});
