// Generation options: stop strings, logprobs, sampling settings and seeds,
// cached prompt tokens on a repeated conversation.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';

import {
  anthropic, chatResult, chatStream, img, messagesResult, messagesStream, MODEL_ID, openai, reference, startServer,
  stopServer, toChat, toMessages, user,
} from './helpers.mjs';

const N = 16;
const CONV = { system: 'Answer in one line.', turns: [user('Tell me a story about a fox.')] };

// A stop string taken from the middle of text: two characters, no U+FFFD,
// at least one character before its first occurrence.
function pickStop(text) {
  const cps = Array.from(text);
  for (let i = Math.floor(cps.length / 2); i < cps.length - 1; i++) {
    const s = cps[i] + cps[i + 1];
    if (s.includes('\uFFFD')) continue;
    const at = text.indexOf(s);
    if (at > 0) return { stop: s, before: text.slice(0, at) };
  }
  return null;
}

describe('generation options', { timeout: 300_000 }, () => {
  let srv;
  let ref;
  before(async () => {
    srv = await startServer();
    ref = await reference(CONV, N);
  });
  after(() => stopServer(srv));

  test('stop strings end the answer and are left out (chat, plain and streamed)', async (t) => {
    const s = pickStop(ref.text);
    if (!s) return t.skip(`no usable stop string in ${JSON.stringify(ref.text)}`);
    const oa = openai(srv);
    const req = { model: MODEL_ID, messages: toChat(CONV), max_tokens: N, temperature: 0 };
    for (const stop of [s.stop, [s.stop, '\u0001never\u0002']]) {
      const r = chatResult(await oa.chat.completions.create({ ...req, stop }));
      assert.equal(r.text, s.before, `stop ${JSON.stringify(stop)}`);
      assert.equal(r.finish, 'stop');
      assert.ok(r.completion >= 1 && r.completion <= N, `completion_tokens ${r.completion}`);
    }
    const st = await chatStream(await oa.chat.completions.create({
      ...req, stop: [s.stop], stream: true, stream_options: { include_usage: true },
    }));
    assert.equal(st.text, s.before);
    assert.equal(st.finish, 'stop');
  });

  test('stop_sequences end the answer and are left out (messages, plain and streamed)', async (t) => {
    const s = pickStop(ref.text);
    if (!s) return t.skip(`no usable stop string in ${JSON.stringify(ref.text)}`);
    const an = anthropic(srv);
    const req = { model: MODEL_ID, ...toMessages(CONV), max_tokens: N, temperature: 0, stop_sequences: [s.stop] };
    const r = messagesResult(await an.messages.create(req));
    assert.equal(r.text, s.before);
    assert.equal(r.stopReason, 'stop_sequence');
    assert.equal(r.stopSequence, s.stop);
    const st = await messagesStream(await an.messages.create({ ...req, stream: true }));
    assert.equal(st.text, s.before);
    assert.equal(st.stopReason, 'stop_sequence');
    assert.equal(st.stopSequence, s.stop);
  });

  test('a stream without stream_options has no usage chunk', async () => {
    const stream = await openai(srv).chat.completions.create({
      model: MODEL_ID, messages: toChat(CONV), max_tokens: 4, temperature: 0, stream: true,
    });
    let text = '';
    for await (const ch of stream) {
      assert.ok(ch.usage == null, 'no usage');
      assert.equal(ch.choices.length, 1);
      text += ch.choices[0].delta?.content ?? '';
    }
    assert.equal(text, (await reference(CONV, 4)).text);
  });

  test('a stop string that never appears changes nothing', async () => {
    const r = chatResult(await openai(srv).chat.completions.create({
      model: MODEL_ID, messages: toChat(CONV), max_tokens: N, temperature: 0, stop: ['\u0001never\u0002'],
    }));
    assert.equal(r.text, ref.text);
    assert.equal(r.finish, ref.stopped ? 'stop' : 'length');
  });

  test('logprobs and top_logprobs', async () => {
    const r = chatResult(await openai(srv).chat.completions.create({
      model: MODEL_ID, messages: toChat(CONV), max_tokens: 6, temperature: 0, logprobs: true, top_logprobs: 3,
    }));
    const lp = r.raw.choices[0].logprobs?.content;
    assert.ok(Array.isArray(lp), 'choices[0].logprobs.content');
    assert.equal(lp.length, r.completion, 'one entry per generated token');
    for (const e of lp) {
      assert.equal(typeof e.token, 'string');
      assert.ok(e.logprob <= 0, `logprob ${e.logprob}`);
      assert.ok(e.bytes === null || Array.isArray(e.bytes), 'bytes');
      assert.equal(e.top_logprobs.length, 3);
      for (let i = 1; i < 3; i++) assert.ok(e.top_logprobs[i - 1].logprob >= e.top_logprobs[i].logprob, 'top_logprobs sorted');
      // greedy: the chosen token is the most likely one
      assert.ok(Math.abs(e.logprob - e.top_logprobs[0].logprob) < 1e-4, `chosen ${e.logprob}, best ${e.top_logprobs[0].logprob}`);
      for (const t of e.top_logprobs) assert.ok(t.logprob <= 0 && typeof t.token === 'string');
    }
    if (!r.text.includes('\uFFFD') && lp.every((e) => Array.isArray(e.bytes))) {
      assert.equal(Buffer.from(lp.flatMap((e) => e.bytes)).toString('utf8'), r.text, 'the tokens\' bytes make the text');
    }
  });

  test('no logprobs unless asked', async () => {
    const r = chatResult(await openai(srv).chat.completions.create({
      model: MODEL_ID, messages: toChat(CONV), max_tokens: 2, temperature: 0,
    }));
    assert.ok(r.raw.choices[0].logprobs == null, 'logprobs is null');
  });

  test('sampling: temperature, top_p and a seed give the same text for the same seed', async () => {
    const oa = openai(srv);
    const req = { model: MODEL_ID, messages: toChat(CONV), max_tokens: N, temperature: 0.9, top_p: 0.95, seed: 1234 };
    const a = chatResult(await oa.chat.completions.create(req));
    const b = chatResult(await oa.chat.completions.create(req));
    assert.equal(b.text, a.text);
    assert.ok(a.completion >= 1 && a.completion <= N);
    const an = anthropic(srv);
    const m = messagesResult(await an.messages.create({ model: MODEL_ID, ...toMessages(CONV), max_tokens: N, temperature: 0.7, top_p: 0.9 }));
    assert.ok(m.completion >= 1 && m.completion <= N);
  });

  test('a repeated conversation reports cached prompt tokens', async () => {
    const conv = { turns: [user(img('small.png'), 'Repeat after me: cached.')] };
    const oa = openai(srv);
    const req = { model: MODEL_ID, messages: toChat(conv), max_tokens: 4, temperature: 0 };
    // another conversation first, so that the first request below starts cold
    await oa.chat.completions.create({ model: MODEL_ID, messages: [{ role: 'user', content: 'x' }], max_tokens: 1 });
    const a = chatResult(await oa.chat.completions.create(req));
    const b = chatResult(await oa.chat.completions.create(req));
    assert.equal(b.text, a.text);
    assert.equal(b.prompt, a.prompt);
    assert.ok(a.cached < a.prompt / 2, `first: cached ${a.cached} of ${a.prompt}`);
    assert.ok(b.cached > a.prompt / 2, `repeat: cached ${b.cached} of ${b.prompt}`);
    const an = anthropic(srv);
    const m = messagesResult(await an.messages.create({ model: MODEL_ID, ...toMessages(conv), max_tokens: 4, temperature: 0 }));
    assert.equal(m.text, a.text);
    assert.equal(m.prompt, a.prompt);
    assert.ok(m.cached > a.prompt / 2, `messages: cache_read_input_tokens ${m.cached} of ${m.prompt}`);
  });
});
