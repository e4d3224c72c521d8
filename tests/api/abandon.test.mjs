// Work nobody waits for (issue 13, item 3): a request whose client went away
// is cancelled whether it is running or still queued, streamed or not, so
// the next client does not wait for it; and past --max-queue waiting
// requests the server answers 503 with Retry-After at once.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';

import { metric, metrics, MODEL_ID, sleep, startServer, stopServer, waitMetrics } from './helpers.mjs';

const LONG = [{ role: 'user', content: 'Write a very long essay about rivers.' }];
const SHORT = [{ role: 'user', content: 'Is the server still fine?' }];

// A chat request through fetch (the raw status and headers matter here).
function chat(srv, { stream = false, max_tokens = 100000, messages = LONG, signal } = {}) {
  return fetch(`${srv.url}/v1/chat/completions`, {
    method: 'POST', signal, headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: MODEL_ID, messages, max_tokens, temperature: 0, stream }),
  });
}

// Starts a long stream and waits for its first bytes: the worker is busy with it.
async function busyWorker(srv) {
  const ac = new AbortController();
  const r = await chat(srv, { stream: true, signal: ac.signal });
  const reader = r.body.getReader();
  await reader.read();
  return { stop: () => { ac.abort(); reader.cancel().catch(() => {}); } };
}

const cancelled = (s, s0) => metric(s, 'pinhole_requests_cancelled_total') - metric(s0, 'pinhole_requests_cancelled_total');
const swallow = (p) => p.catch((e) => { if (e.name !== 'AbortError') throw e; });

describe('abandoned requests', { timeout: 300_000 }, () => {
  let srv;
  before(async () => { srv = await startServer({ vision: false, extra: ['-c', '4096', '--max-queue', '3', '--parallel', '1'] }); });
  after(() => stopServer(srv));

  test('a running non-streaming request stops when its client leaves', async () => {
    const s0 = await metrics(srv);
    const ac = new AbortController();
    const p = swallow(chat(srv, { signal: ac.signal }));
    await sleep(300); // generating (the counters move only when a turn ends)
    ac.abort();
    await p;
    const s1 = await waitMetrics(srv, (s) => cancelled(s, s0) >= 1, 10_000);
    await sleep(500);
    const s2 = await metrics(srv);
    assert.equal(metric(s2, 'pinhole_generated_tokens_total'), metric(s1, 'pinhole_generated_tokens_total'),
                 'no tokens generated after the client left');
    assert.ok(metric(s2, 'pinhole_generated_tokens_total') - metric(s0, 'pinhole_generated_tokens_total') < 3000,
              'the generation did not run to the end of the context');
  });

  test('queued requests of clients that left never run, and the next client is served at once', async () => {
    const s0 = await metrics(srv);
    const busy = await busyWorker(srv);
    const acs = [0, 1, 2].map(() => new AbortController());
    const waiting = acs.map((ac, i) => swallow(chat(srv, { stream: i === 1, signal: ac.signal })));
    await waitMetrics(srv, (s) => metric(s, 'pinhole_queue_length') === 3, 10_000);
    for (const ac of acs) ac.abort();
    await Promise.all(waiting);
    await sleep(600); // the server notices within 0.2 s
    busy.stop();
    await waitMetrics(srv, (s) => cancelled(s, s0) >= 4 && metric(s, 'pinhole_queue_length') === 0, 10_000);
    const t0 = performance.now();
    const r = await chat(srv, { messages: SHORT, max_tokens: 8 });
    assert.equal(r.status, 200);
    await r.json();
    const ms = performance.now() - t0;
    assert.ok(ms < 5000, `the next request took ${ms.toFixed(0)} ms (the abandoned ones ran?)`);
    const s1 = await metrics(srv);
    assert.equal(cancelled(s1, s0), 4, 'the stream and the three queued requests were cancelled');
    assert.ok(metric(s1, 'pinhole_generated_tokens_total') - metric(s0, 'pinhole_generated_tokens_total') < 3000,
              'the abandoned requests generated nothing');
  });

  test('past --max-queue waiting requests: 503 with Retry-After, at once', async () => {
    const busy = await busyWorker(srv);
    const acs = [0, 1, 2].map(() => new AbortController());
    const waiting = acs.map((ac) => swallow(chat(srv, { signal: ac.signal })));
    await waitMetrics(srv, (s) => metric(s, 'pinhole_queue_length') === 3, 10_000);
    const t0 = performance.now();
    const r = await chat(srv, { messages: SHORT, max_tokens: 8 });
    const body = await r.json();
    assert.equal(r.status, 503);
    assert.equal(r.headers.get('retry-after'), '1');
    assert.match(body.error.message, /--max-queue/);
    assert.ok(performance.now() - t0 < 2000, 'refused without waiting');
    for (const ac of acs) ac.abort();
    await Promise.all(waiting);
    busy.stop();
    await waitMetrics(srv, (s) => metric(s, 'pinhole_queue_length') === 0, 10_000);
    const ok = await chat(srv, { messages: SHORT, max_tokens: 8 });
    assert.equal(ok.status, 200);
    await ok.json();
  });
});
