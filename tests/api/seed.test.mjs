// Sampling seeds: `seed` (Chat Completions, and an extension field in
// Responses and Messages) repeats an answer; a request without one gets a
// random seed (getrandom), so identical requests sent within the same second
// are sampled apart; a seed of the wrong type is refused.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';

import {
  anthropic, anthropicError, chatResult, messagesResult, MODEL_ID, openai, openaiError, responsesResult, startServer,
  stopServer, toChat, toMessages, toResponses, user,
} from './helpers.mjs';

const N = 24;
const CONV = { system: 'Answer in one line.', turns: [user('Tell me a story about a fox.')] };

// One request of each API at temperature 1, with extra fields (seed ...): its text.
const ASK = {
  chat: async (srv, extra) => chatResult(await openai(srv).chat.completions.create({
    model: MODEL_ID, messages: toChat(CONV), max_tokens: N, temperature: 1, ...extra,
  })),
  responses: async (srv, extra) => responsesResult(await openai(srv).responses.create({
    model: MODEL_ID, ...toResponses(CONV), max_output_tokens: N, temperature: 1, ...extra,
  })),
  messages: async (srv, extra) => messagesResult(await anthropic(srv).messages.create({
    model: MODEL_ID, ...toMessages(CONV), max_tokens: N, temperature: 1, ...extra,
  })),
};

describe('sampling seeds', { timeout: 300_000 }, () => {
  let srv;
  before(async () => { srv = await startServer(); });
  after(() => stopServer(srv));

  for (const [api, ask] of Object.entries(ASK)) {
    test(`${api}: the same seed gives the same text at temperature 1`, async () => {
      const a = await ask(srv, { seed: 4242 });
      const b = await ask(srv, { seed: 4242 });
      assert.ok(a.completion >= 1, `completion tokens ${a.completion}`);
      assert.equal(b.text, a.text);
      assert.equal(b.completion, a.completion);
      // and another seed gives another answer (so the seed is not ignored)
      const c = await ask(srv, { seed: 4243 });
      assert.notEqual(c.text, a.text, `seeds 4242 and 4243 gave the same ${JSON.stringify(a.text)}`);
    });

    test(`${api}: without a seed, two requests sent back to back differ`, async () => {
      const t0 = Date.now();
      const a = await ask(srv, {});
      const b = await ask(srv, {});
      const ms = Date.now() - t0;
      assert.ok(a.completion >= 8 && b.completion >= 8, `completion tokens ${a.completion}, ${b.completion}`);
      assert.notEqual(b.text, a.text, `the same text twice (${ms} ms apart): ${JSON.stringify(a.text)}`);
    });
  }

  test('a seed that is not an integer is refused with 400 (responses, messages)', async () => {
    const oa = openai(srv);
    await openaiError(oa.responses.create({ model: MODEL_ID, input: 'hi', max_output_tokens: 4, seed: 'x' }), 400, /'seed'/);
    await openaiError(oa.responses.create({ model: MODEL_ID, input: 'hi', max_output_tokens: 4, seed: 1.5 }), 400, /'seed'/);
    const an = anthropic(srv);
    const msgs = [{ role: 'user', content: 'hi' }];
    await anthropicError(an.messages.create({ model: MODEL_ID, messages: msgs, max_tokens: 4, seed: 'x' }), 400,
                         'invalid_request_error', /'seed'/);
    await anthropicError(an.messages.create({ model: MODEL_ID, messages: msgs, max_tokens: 4, seed: 1.5 }), 400,
                         'invalid_request_error', /'seed'/);
    // the server still answers afterwards
    const r = await ASK.messages(srv, { seed: 1 });
    assert.ok(r.completion >= 1);
  });
});
