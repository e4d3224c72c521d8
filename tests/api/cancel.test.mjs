// A client that goes away mid-stream stops its generation: the server
// counts it as cancelled, stops generating, and answers the next request
// correctly.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';

import {
  anthropic, chatResult, metric, metrics, MODEL_ID, openai, reference, sleep, startServer, stopServer, toChat,
  toMessages, toResponses, user, waitMetrics,
} from './helpers.mjs';

const LONG = { turns: [user('Write a very long essay about rivers.')] };
const CHECK = { system: 'Be brief.', turns: [user('Is the server still fine?')] };
const N = 8;

describe('cancel on disconnect', { timeout: 300_000 }, () => {
  let srv;
  let ref;
  before(async () => {
    srv = await startServer({ extra: ['-c', '4096'] });
    ref = await reference(CHECK, N);
  });
  after(() => stopServer(srv));

  // Starts a stream with room for thousands of tokens, aborts it after the
  // first text delta, and checks that the generation stopped.
  async function abortAfterFirstDelta(name, start, isDelta) {
    const s0 = await metrics(srv);
    const ac = new AbortController();
    const stream = await start(ac.signal);
    let deltas = 0;
    try {
      for await (const ev of stream) {
        if (isDelta(ev)) { deltas++; ac.abort(); }
      }
    } catch (e) {
      if (!ac.signal.aborted) throw e;
    }
    assert.ok(deltas >= 1, `${name}: a delta arrived before the abort`);
    const cancelled = (s) => metric(s, 'pinhole_requests_cancelled_total') - metric(s0, 'pinhole_requests_cancelled_total');
    const s1 = await waitMetrics(srv, (s) => cancelled(s) >= 1, 30_000);
    assert.equal(cancelled(s1), 1, `${name}: pinhole_requests_cancelled_total went up by one`);
    // generation has stopped: the token counter stays put
    await sleep(300);
    const s2 = await metrics(srv);
    assert.equal(metric(s2, 'pinhole_generated_tokens_total'), metric(s1, 'pinhole_generated_tokens_total'),
                 `${name}: no tokens generated after the cancel`);
    assert.ok(metric(s2, 'pinhole_generated_tokens_total') - metric(s0, 'pinhole_generated_tokens_total') < 3000,
              `${name}: the generation did not run to the end of the context`);
    assert.equal(metric(s2, 'pinhole_queue_length'), 0);
    // and the server still answers, with the same greedy text
    const r = chatResult(await openai(srv).chat.completions.create({
      model: MODEL_ID, messages: toChat(CHECK), max_tokens: N, temperature: 0,
    }));
    assert.equal(r.text, ref.text, `${name}: the next answer`);
  }

  test('chat completions', () => abortAfterFirstDelta('chat',
    (signal) => openai(srv).chat.completions.create(
      { model: MODEL_ID, messages: toChat(LONG), max_tokens: 100000, temperature: 0, stream: true }, { signal }),
    (ch) => Boolean(ch.choices?.[0]?.delta?.content)));

  test('responses', () => abortAfterFirstDelta('responses',
    (signal) => openai(srv).responses.create(
      { model: MODEL_ID, ...toResponses(LONG), max_output_tokens: 100000, temperature: 0, stream: true }, { signal }),
    (ev) => ev.type === 'response.output_text.delta' && ev.delta.length > 0));

  test('messages', () => abortAfterFirstDelta('messages',
    (signal) => anthropic(srv).messages.create(
      { model: MODEL_ID, ...toMessages(LONG), max_tokens: 100000, temperature: 0, stream: true }, { signal }),
    (ev) => ev.type === 'content_block_delta' && ev.delta.text.length > 0));
});
