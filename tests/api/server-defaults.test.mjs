// Server-side sampling defaults: `pinhole serve --temp F --top-p F --top-k N
// --max-tokens N` apply to every request of the three APIs that leaves the
// field out; a field in the request always wins. --max-tokens defaults to
// 4096 (0: until the context is full); bad flag values exit with status 2.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { describe, test } from 'node:test';

import {
  anthropic, BIN, chatResult, messagesResult, MODEL, MODEL_ID, openai, reference, responsesResult, toChat,
  toMessages, toResponses, user, withServer,
} from './helpers.mjs';

const N = 16;
const CONV = { system: 'Answer in one line.', turns: [user('Tell me a story about a fox.')] };

const chat = async (srv, extra = {}) => chatResult(await openai(srv).chat.completions.create({
  model: MODEL_ID, messages: toChat(CONV), ...extra,
}));
const responses = async (srv, extra = {}) => responsesResult(await openai(srv).responses.create({
  model: MODEL_ID, ...toResponses(CONV), ...extra,
}));
const messages = async (srv, extra = {}) => messagesResult(await anthropic(srv).messages.create({
  model: MODEL_ID, ...toMessages(CONV), max_tokens: N, ...extra,
}));

describe('server sampling defaults', { timeout: 300_000 }, () => {
  test('--max-tokens 5: requests without a limit stop after 5 tokens; a request limit wins', async () => {
    await withServer({ vision: false, extra: ['--max-tokens', '5'] }, async (srv) => {
      const c = await chat(srv, { temperature: 0 });
      assert.equal(c.completion, 5, 'chat completion_tokens');
      assert.equal(c.finish, 'length');
      const r = await responses(srv, { temperature: 0 });
      assert.equal(r.completion, 5, 'responses output_tokens');
      assert.equal(r.status, 'incomplete');
      assert.equal(r.raw.incomplete_details?.reason, 'max_output_tokens');
      assert.equal(r.raw.max_output_tokens, 5, 'the limit in force is echoed');
      // the request's own limit wins, also above the server's
      for (const key of ['max_tokens', 'max_completion_tokens']) {
        const c3 = await chat(srv, { temperature: 0, [key]: 3 });
        assert.equal(c3.completion, 3, key);
        assert.equal(c3.finish, 'length');
      }
      const c8 = await chat(srv, { temperature: 0, max_tokens: 8 });
      assert.ok(c8.completion > 5, `max_tokens 8 gave ${c8.completion} tokens`);
      const r3 = await responses(srv, { temperature: 0, max_output_tokens: 3 });
      assert.equal(r3.completion, 3);
      assert.equal(r3.status, 'incomplete');
      // Messages requires max_tokens; it is used as given
      const m = await messages(srv, { temperature: 0, max_tokens: 7 });
      assert.ok(m.completion > 5, `messages max_tokens 7 gave ${m.completion} tokens`);
    });
  });

  test('the default limit is 4096; --max-tokens 0 means until the context is full', async () => {
    // (a small context, so that the answer without a limit ends soon)
    await withServer({ vision: false, extra: ['-c', '64'] }, async (srv) => {
      const r = await responses(srv, { temperature: 0, max_output_tokens: 2 });
      assert.equal(r.raw.max_output_tokens, 2);
      const d = await openai(srv).responses.create({ model: MODEL_ID, input: 'hi', temperature: 0, stream: false,
                                                     max_output_tokens: null });
      assert.equal(d.max_output_tokens, 4096, 'the server default is echoed');
    });
    await withServer({ vision: false, extra: ['--max-tokens', '0', '-c', '128'] }, async (srv) => {
      const r = await responses(srv, { temperature: 0 });
      assert.equal(r.raw.max_output_tokens, null, 'no limit but the context');
      // the tiny model's greedy story runs on: it ends with the context, far past a few tokens
      assert.equal(r.finish, 'length');
      assert.equal(r.prompt + r.completion, 128, `stopped at ${r.prompt} + ${r.completion} of 128 rows`);
    });
  });

  test('--temp 0: requests without a temperature are greedy, without a seed', async () => {
    const ref = await reference(CONV, N);
    await withServer({ vision: false, extra: ['--temp', '0'] }, async (srv) => {
      const a = await chat(srv, { max_tokens: N });
      const b = await chat(srv, { max_tokens: N });
      assert.equal(a.text, ref.text, 'chat: the greedy answer');
      assert.equal(b.text, a.text);
      const r = await responses(srv, { max_output_tokens: N });
      assert.equal(r.text, ref.text, 'responses: the greedy answer');
      assert.equal(r.raw.temperature, 0, 'the temperature in force is echoed');
      const m1 = await messages(srv);
      const m2 = await messages(srv);
      assert.equal(m1.text, ref.text, 'messages: the greedy answer');
      assert.equal(m2.text, m1.text);
      // a temperature in the request wins: sampled, so two answers differ
      const s1 = await chat(srv, { max_tokens: 24, temperature: 1 });
      const s2 = await chat(srv, { max_tokens: 24, temperature: 1 });
      assert.notEqual(s2.text, s1.text, `temperature 1 gave the same text twice: ${JSON.stringify(s1.text)}`);
    });
    // and a default server samples (temperature 1, as before)
    await withServer({ vision: false }, async (srv) => {
      const a = await chat(srv, { max_tokens: 24 });
      const b = await chat(srv, { max_tokens: 24 });
      assert.notEqual(b.text, a.text, `the default server gave the same text twice: ${JSON.stringify(a.text)}`);
    });
  });

  test('--top-k 1: sampling at temperature 1 is deterministic without a seed', async () => {
    const ref = await reference(CONV, N);
    await withServer({ vision: false, extra: ['--top-k', '1'] }, async (srv) => {
      const a = await chat(srv, { max_tokens: N, temperature: 1 });
      const b = await chat(srv, { max_tokens: N, temperature: 1 });
      assert.equal(a.text, ref.text, 'top-k 1 is the greedy answer');
      assert.equal(b.text, a.text);
      const r1 = await responses(srv, { max_output_tokens: N, temperature: 1 });
      const r2 = await responses(srv, { max_output_tokens: N, temperature: 1 });
      assert.equal(r1.text, ref.text);
      assert.equal(r2.text, r1.text);
      const m1 = await messages(srv, { temperature: 1 });
      assert.equal(m1.text, ref.text);
      // Messages has its own top_k, which wins: 0 turns it off
      const s1 = await messages(srv, { temperature: 1, top_k: 0, max_tokens: 24 });
      const s2 = await messages(srv, { temperature: 1, top_k: 0, max_tokens: 24 });
      assert.notEqual(s2.text, s1.text, `top_k 0 gave the same text twice: ${JSON.stringify(s1.text)}`);
    });
  });

  test('bad flag values exit with status 2 and say why', async () => {
    const cases = [
      [['--temp', '-1'], /--temp/], [['--temp', 'x'], /--temp/], [['--top-p', '0'], /--top-p/],
      [['--top-p', '1.5'], /--top-p/], [['--top-k', '-1'], /--top-k/], [['--max-tokens', '-3'], /--max-tokens/],
      [['--max-tokens', '2.5'], /--max-tokens/], [['--max-tokens'], /--max-tokens/],
    ];
    for (const [flags, re] of cases) {
      const proc = spawn(BIN, ['serve', '-m', MODEL, '--port', '0', ...flags], { stdio: ['ignore', 'ignore', 'pipe'] });
      let stderr = '';
      proc.stderr.setEncoding('utf8');
      proc.stderr.on('data', (d) => { stderr += d; });
      const code = await new Promise((resolve) => proc.on('exit', (c, sig) => resolve(sig ?? c)));
      assert.equal(code, 2, `${flags.join(' ')}: exit ${code}; stderr:\n${stderr}`);
      assert.match(stderr, re, flags.join(' '));
    }
  });
});
