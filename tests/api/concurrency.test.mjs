// Eight clients at once: every request completes with the answer it gets
// alone, and they complete in the order the server received them (one
// inference worker, first come first served). Each is sent once the server
// has queued the one before, so that the order of arrival is known however
// loaded the machine is.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';

import {
  anthropic, chatResult, messagesResult, metric, metrics, MODEL_ID, openai, responsesResult, startServer, stopServer,
  waitMetrics,
} from './helpers.mjs';

const PROMPTS = Array.from({ length: 8 }, (_, i) => `Client ${i + 1} asks: what is ${i + 1} times ${i + 3}?`);

// Alternates the three endpoints so that they also share the one queue.
function ask(srv, i, N) {
  const prompt = PROMPTS[i];
  switch (i % 3) {
    case 0:
      return openai(srv).chat.completions.create({ model: MODEL_ID, messages: [{ role: 'user', content: prompt }], max_tokens: N, temperature: 0 })
        .then((r) => chatResult(r).text);
    case 1:
      return openai(srv).responses.create({ model: MODEL_ID, input: prompt, max_output_tokens: N, temperature: 0 })
        .then((r) => responsesResult(r).text);
    default:
      return anthropic(srv).messages.create({ model: MODEL_ID, messages: [{ role: 'user', content: prompt }], max_tokens: N, temperature: 0 })
        .then((r) => messagesResult(r).text);
  }
}

describe('concurrent clients', { timeout: 300_000 }, () => {
  let srv;
  before(async () => { srv = await startServer({ extra: ['--parallel', '1'] }); }); // one worker: the queue's order
  after(() => stopServer(srv));

  test('8 clients: same answers as alone, first come first served', async () => {
    // Long enough answers that each request outlasts the time between two
    // sends, whatever the speed of the machine and the build: ~300 ms each.
    const t0 = Date.now();
    await ask(srv, 0, 32);
    const N = Math.min(512, Math.max(32, Math.ceil((32 * 300) / Math.max(1, Date.now() - t0))));
    const alone = [];
    for (let i = 0; i < PROMPTS.length; i++) alone.push(await ask(srv, i, N));
    const order = [];
    const sentAt = [];
    const doneAt = [];
    const pending = [];
    let queued = 0;
    const accepted = (s) => metric(s, 'pinhole_requests_queued_total');
    const base = accepted(await metrics(srv));
    for (let i = 0; i < PROMPTS.length; i++) {
      sentAt.push(Date.now());
      pending.push(ask(srv, i, N).then((text) => { order.push(i); doneAt[i] = Date.now(); return text; }));
      const s = await waitMetrics(srv, (m) => accepted(m) >= base + i + 1, 10_000, 5);
      assert.equal(accepted(s), base + i + 1, `client ${i + 1}'s request was queued`);
      if (i === 4) queued = metric(s, 'pinhole_queue_length');
    }
    const texts = await Promise.all(pending);
    for (let i = 0; i < PROMPTS.length; i++) assert.equal(texts[i], alone[i], `client ${i + 1}'s answer (max_tokens ${N})`);
    assert.deepEqual(order, [...PROMPTS.keys()], 'completion order');
    const overlapping = sentAt.slice(1).filter((t, i) => t < doneAt[i]).length;
    assert.ok(overlapping >= 4, `only ${overlapping} of 7 requests were sent before the previous one completed (max_tokens ${N})`);
    assert.ok(queued >= 1, `pinhole_queue_length during the burst: ${queued}`);
    assert.equal(metric(await metrics(srv), 'pinhole_queue_length'), 0, 'the queue is empty afterwards');
  });
});
