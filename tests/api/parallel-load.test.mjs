// Several requests at once (issue 26): each answer equals the same request
// sent alone to the same server beforehand (text, token counts and, on
// /v1/chat/completions, the log-probabilities), whatever else runs beside
// it; a request cancelled, timed out or left by its client, running or
// waiting, is counted and frees its place for the others; and a Qwen3.5
// server answers a mixed load of pictures and text as it answers each alone.
//
// The abort cases use pinhole-test's PINHOLE_TEST_PREFILL_DELAY_MS, a sleep
// of the request's own worker after each evaluated piece of its prompt
// (a text chunk, a picture's rows): a request stays running that long
// whatever the machine's speed, so that a third one is sure to wait.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';

import {
  anthropic, chatResult, chatStream, messagesResult, messagesStream, metric, metrics, openai, picture, QWEN35,
  responsesResult, responsesStream, SANITIZED, sleep, startServer, stopServer, TEST_BIN, waitMetrics,
} from './helpers.mjs';
import { gen } from './reuse-cases.mjs';

// The sanitized build computes slower: the delays and the deadline grow
// with it (all by one factor, so that what must outlast what still does).
const SLOW = SANITIZED ? 2 : 1;

// ---- requests in the three APIs ----------------------------------------------

// A picture as every API takes it: the oracle's files, or a generated 64x64 PNG.
const file = (name) => picture(name);
const made = (seed) => {
  const url = gen(seed);
  return { name: `gen${seed}`, mime: 'image/png', b64: url.slice(url.indexOf(',') + 1), url };
};

// One user turn of text and at most one picture, sent through api
// ('chat', 'responses' or 'messages'), streamed or not, greedy, n tokens at
// most; chat asks for the top 3 log-probabilities of every token. Returns
// what a client compares: { text, reasoning, finish, prompt, completion, lp }.
async function ask(srv, q, opts = {}) {
  const model = srv.model.id;
  if (q.api === 'chat') {
    const body = {
      model, max_tokens: q.n, temperature: 0, logprobs: true, top_logprobs: 3,
      messages: [{
        role: 'user',
        content: q.image ? [{ type: 'text', text: q.text }, { type: 'image_url', image_url: { url: q.image.url } }] : q.text,
      }],
    };
    if (!q.stream) {
      const r = await openai(srv).chat.completions.create(body, opts);
      const c = chatResult(r);
      return shape(c, r.choices[0].message.reasoning_content ?? '', r.choices[0].logprobs?.content);
    }
    const chunks = [];
    const stream = await openai(srv).chat.completions.create({ ...body, stream: true, stream_options: { include_usage: true } }, opts);
    for await (const ch of stream) chunks.push(ch);
    const c = await chatStream(chunks);
    const reasoning = chunks.map((ch) => ch.choices?.[0]?.delta?.reasoning_content ?? '').join('');
    return shape(c, reasoning, chunks.flatMap((ch) => ch.choices?.[0]?.logprobs?.content ?? []));
  }
  if (q.api === 'responses') {
    const input = q.image
      ? [{ type: 'message', role: 'user', content: [{ type: 'input_text', text: q.text }, { type: 'input_image', image_url: q.image.url, detail: 'auto' }] }]
      : q.text;
    const body = { model, input, max_output_tokens: q.n, temperature: 0 };
    const c = q.stream ? await responsesStream(await openai(srv).responses.create({ ...body, stream: true }, opts))
      : responsesResult(await openai(srv).responses.create(body, opts));
    return shape(c, '', null);
  }
  const content = q.image
    ? [{ type: 'text', text: q.text }, { type: 'image', source: { type: 'base64', media_type: q.image.mime, data: q.image.b64 } }]
    : q.text;
  const body = { model, messages: [{ role: 'user', content }], max_tokens: q.n, temperature: 0 };
  const c = q.stream ? await messagesStream(await anthropic(srv).messages.create({ ...body, stream: true }, opts))
    : messagesResult(await anthropic(srv).messages.create(body, opts));
  return shape(c, '', null);
}

function shape(c, reasoning, lp) {
  return { text: c.text, reasoning, finish: c.finish, prompt: c.prompt, completion: c.completion, lp: lp ?? null };
}

const label = (q) => `${q.api}${q.stream ? ' stream' : ''}${q.image ? ` + ${q.image.name}` : ''}`;

/** Asserts that got is the answer alone was, field for field (logprobs bit for bit). */
function sameAsAlone(got, alone, what) {
  assert.equal(got.text, alone.text, `${what}: the text of the same request alone`);
  assert.equal(got.reasoning, alone.reasoning, `${what}: the reasoning of the same request alone`);
  assert.equal(got.finish, alone.finish, `${what}: finish`);
  assert.equal(got.prompt, alone.prompt, `${what}: prompt tokens`);
  assert.equal(got.completion, alone.completion, `${what}: completion tokens`);
  if (alone.lp) {
    assert.ok(alone.lp.length > 0 && alone.lp.length === alone.completion, `${what}: a logprobs entry per token`);
    assert.deepEqual(got.lp, alone.lp, `${what}: the log-probabilities of the same request alone`);
  }
}

const M = {
  running: 'pinhole_requests_running', waiting: 'pinhole_requests_waiting', shared: 'pinhole_batch_steps_shared_total',
  cancelled: 'pinhole_requests_cancelled_total', timedOut: 'pinhole_requests_timed_out_total',
  prompt: 'pinhole_prompt_tokens_total',
};
const idle = (s) => metric(s, M.running) === 0 && metric(s, M.waiting) === 0;

/** Polls until pred holds and asserts that it did (what: the message). */
async function until(srv, pred, what, timeoutMs = 60_000 * SLOW) {
  const s = await waitMetrics(srv, pred, timeoutMs, 20);
  assert.ok(pred(s), `${what} (running ${metric(s, M.running)}, waiting ${metric(s, M.waiting)})`);
  return s;
}

// ---- 1. sixteen clients over the three APIs ------------------------------------

const APIS = ['chat', 'responses', 'messages'];
const PICTURES = [file('small.png'), made(1), file('grad.png'), made(2), file('small.png'), made(3), file('alpha.png'), made(4)];
const SIXTEEN = Array.from({ length: 16 }, (_, i) => ({
  api: APIS[i % 3],
  stream: Math.floor(i / 3) % 2 === 1, // each API both ways
  text: i % 2 === 0 ? `Picture ${i / 2 + 1}: what do you see?` : `Client ${i} asks: what is ${i} times ${i + 3}?`,
  image: i % 2 === 0 ? PICTURES[i / 2] : undefined,
  n: 10,
}));

describe('16 clients at once on the default --parallel', { timeout: 600_000 }, () => {
  let srv;
  before(async () => { srv = await startServer(); });
  after(() => stopServer(srv));

  test('every answer is the one it gets alone; 4 run, the rest wait; the steps were shared', async () => {
    const alone = [];
    for (const q of SIXTEEN) alone.push(await ask(srv, q));
    const s0 = await metrics(srv);
    assert.ok(idle(s0));
    // the gauges seen while the clients wait
    let maxRunning = 0;
    let maxWaiting = 0;
    let maxUsage = 0;
    let polling = true;
    const poll = (async () => {
      while (polling) {
        const s = await metrics(srv);
        maxRunning = Math.max(maxRunning, metric(s, M.running));
        maxWaiting = Math.max(maxWaiting, metric(s, M.waiting));
        // the gauges inference gateways read (docs/cluster.md), from the same sample
        assert.equal(metric(s, 'vllm:num_requests_running'), metric(s, M.running));
        assert.equal(metric(s, 'vllm:num_requests_waiting'), metric(s, M.waiting));
        const usage = metric(s, 'vllm:kv_cache_usage_perc');
        assert.ok(usage >= 0 && usage <= 1, `vllm:kv_cache_usage_perc ${usage}`);
        if (metric(s, M.running) > 0) maxUsage = Math.max(maxUsage, usage);
        await sleep(20);
      }
    })();
    let together;
    try {
      together = await Promise.all(SIXTEEN.map((q) => ask(srv, q)));
    } finally {
      polling = false;
      await poll;
    }
    for (let i = 0; i < SIXTEEN.length; i++) sameAsAlone(together[i], alone[i], `client ${i} (${label(SIXTEEN[i])})`);
    const s1 = await until(srv, idle, 'nothing runs or waits afterwards');
    assert.equal(metric(s1, M.running), 0);
    assert.ok(metric(s1, M.shared) > metric(s0, M.shared), 'steps held rows of several requests');
    assert.equal(maxRunning, 4, 'four requests ran at once (--parallel 4), never more');
    assert.ok(maxWaiting >= 1, `requests waited for a slot (at most ${maxWaiting} seen)`);
    assert.ok(maxUsage > 0, 'the running requests held KV blocks (vllm:kv_cache_usage_perc)');
    assert.equal(metric(s1, M.cancelled), metric(s0, M.cancelled), 'nothing cancelled');
  });
});

// ---- 2. aborted requests beside others (--parallel 2) ---------------------------

// The two that run beside an aborted one, or while one waits: a picture
// (its prompt in three pieces, so it holds its slot three delays), and a
// stream of text; then a fresh request once it is over.
const A = { api: 'chat', text: 'Picture: what colours are there?', image: file('grad.png'), n: 8 };
const B = { api: 'messages', stream: true, text: 'Name two rivers and a lake.', image: made(5), n: 8 };
const B_TEXT = { api: 'chat', stream: true, text: 'Name two rivers and a lake.', n: 8 };
const FRESH = { api: 'responses', text: 'Is the server still fine?', n: 8 };
const LONG = 'Write a very long essay about rivers.';
const WAITER = 'Write a very long essay about lakes.';

// A request through fetch (the victims: a raw status, and a socket that
// the client can close at any time).
function rawChat(srv, { content, stream = false, max_tokens = 100000, signal }) {
  return fetch(`${srv.url}/v1/chat/completions`, {
    method: 'POST', signal, headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: srv.model.id, messages: [{ role: 'user', content }], max_tokens, temperature: 0, stream }),
  });
}
const swallowAbort = (p) => p.catch((e) => {
  if (e.name !== 'AbortError' && e.constructor?.name !== 'APIUserAbortError') throw e;
  return null;
});

// A victim the client gives up on: 'cancel' is the official client's
// abort of a stream, 'gone' a plain request whose socket the client closes.
function victim(srv, how, content) {
  const ac = new AbortController();
  let firstDelta;
  let done;
  if (how === 'cancel') {
    done = swallowAbort((async () => {
      const stream = await openai(srv).chat.completions.create(
        { model: srv.model.id, messages: [{ role: 'user', content }], max_tokens: 100000, temperature: 0, stream: true },
        { signal: ac.signal });
      // read until the first delta, then hold the stream unread until the abort
      const it = stream[Symbol.asyncIterator]();
      for (;;) {
        const { value, done: end } = await it.next();
        assert.ok(!end, 'the long stream ended before the abort');
        if (value.choices?.[0]?.delta?.content) break;
      }
      firstDelta();
      await new Promise((resolve) => ac.signal.addEventListener('abort', resolve));
      return null;
    })());
    const started = new Promise((resolve) => { firstDelta = resolve; });
    return { started, done, abort: () => ac.abort() };
  }
  done = swallowAbort(rawChat(srv, { content, signal: ac.signal }).then((r) => r.text()));
  return { started: null, done, abort: () => ac.abort() };
}

describe('cancelled and abandoned requests beside others (--parallel 2)', { timeout: 600_000 }, () => {
  let srv;
  const alone = {};
  before(async () => {
    // --no-reuse: every prompt is evaluated, and held by the delay, alike alone and together
    srv = await startServer({
      bin: TEST_BIN, extra: ['--parallel', '2', '--no-reuse', '-c', '8192'],
      env: { PINHOLE_TEST_PREFILL_DELAY_MS: String(400 * SLOW) },
    });
    for (const [k, q] of Object.entries({ A, B, FRESH })) alone[k] = await ask(srv, q);
  });
  after(() => stopServer(srv));

  // A victim runs (the only request, or it has sent a token), A and B
  // come, one of them waits; the victim is aborted and the waiting one
  // takes its slot.
  async function running(how) {
    const s0 = await metrics(srv);
    const v = victim(srv, how, LONG);
    if (v.started) await v.started;
    else await until(srv, (s) => metric(s, M.running) === 1, 'the victim runs');
    const pa = ask(srv, A);
    const pb = ask(srv, B);
    await until(srv, (s) => metric(s, M.running) === 2 && metric(s, M.waiting) === 1, 'one of A and B waits');
    v.abort();
    await v.done;
    await until(srv, (s) => metric(s, M.cancelled) - metric(s0, M.cancelled) === 1, 'the victim is counted cancelled');
    const [a, b] = await Promise.all([pa, pb]);
    sameAsAlone(a, alone.A, `A beside a ${how} victim`);
    sameAsAlone(b, alone.B, `B beside a ${how} victim`);
    await afterwards(s0, how);
  }

  // A and B run, the victim waits for a slot and is aborted there: it is
  // dropped from the queue without running (no prompt of it counted).
  async function waiting(how) {
    const s0 = await metrics(srv);
    const pa = ask(srv, A);
    const pb = ask(srv, B);
    await until(srv, (s) => metric(s, M.running) === 2, 'A and B run');
    const v = victim(srv, how, WAITER);
    await until(srv, (s) => metric(s, M.waiting) === 1, 'the victim waits');
    v.abort();
    await v.done;
    await until(srv, (s) => metric(s, M.cancelled) - metric(s0, M.cancelled) === 1 && metric(s, M.waiting) === 0,
                'the waiting victim is counted cancelled and leaves the queue');
    const [a, b] = await Promise.all([pa, pb]);
    sameAsAlone(a, alone.A, `A while a ${how} victim waited`);
    sameAsAlone(b, alone.B, `B while a ${how} victim waited`);
    const s1 = await until(srv, idle, 'nothing runs or waits');
    assert.equal(metric(s1, M.prompt) - metric(s0, M.prompt), a.prompt + b.prompt,
                 'the prompt tokens counted are A\'s and B\'s: the victim never ran');
    await afterwards(s0, how);
  }

  // The slots are free again, and a fresh request gets its answer.
  async function afterwards(s0, how) {
    await until(srv, idle, `${how}: nothing runs or waits`);
    sameAsAlone(await ask(srv, FRESH), alone.FRESH, `a fresh request after the ${how} victim`);
    const s = await metrics(srv);
    assert.equal(metric(s, M.running), 0, 'its slot is free again');
    assert.equal(metric(s, M.cancelled) - metric(s0, M.cancelled), 1, 'one request cancelled');
    assert.equal(metric(s, M.timedOut) - metric(s0, M.timedOut), 0, 'none timed out');
  }

  test('a running stream cancelled by its client', () => running('cancel'));
  test('a running request whose client went away', () => running('gone'));
  test('a waiting stream cancelled by its client', () => waiting('cancel'));
  test('a waiting request whose client went away', () => waiting('gone'));
});

describe('timed-out requests beside others (--parallel 2, --request-timeout-s)', { timeout: 600_000 }, () => {
  const DELAY_MS = 400 * SLOW;
  const TIMEOUT_S = 8 * SLOW;
  let srv;
  const alone = {};
  before(async () => {
    srv = await startServer({
      bin: TEST_BIN, extra: ['--parallel', '2', '--no-reuse', '-c', '8192', '--request-timeout-s', String(TIMEOUT_S)],
      env: { PINHOLE_TEST_PREFILL_DELAY_MS: String(DELAY_MS) },
    });
    for (const [k, q] of Object.entries({ A, B_TEXT, FRESH })) alone[k] = await ask(srv, q);
  });
  after(() => stopServer(srv));

  const timedOut = async (p, re, what) => {
    const r = await p;
    assert.equal(r.status, 503, `${what}: ${await r.clone().text()}`);
    const body = await r.json();
    assert.match(body.error.message, re, what);
  };

  async function afterwards(s0, n) {
    await until(srv, idle, 'nothing runs or waits');
    sameAsAlone(await ask(srv, FRESH), alone.FRESH, 'a fresh request afterwards');
    const s = await metrics(srv);
    assert.equal(metric(s, M.running), 0, 'the slots are free again');
    assert.equal(metric(s, M.timedOut) - metric(s0, M.timedOut), n, `${n} timed out`);
    assert.equal(metric(s, M.cancelled) - metric(s0, M.cancelled), 0, 'none cancelled by a client');
  }

  test('a running request past its deadline; the one waiting behind it takes its slot', async () => {
    const s0 = await metrics(srv);
    const v = rawChat(srv, { content: LONG });
    await until(srv, (s) => metric(s, M.running) === 1, 'the long request runs');
    const pa = ask(srv, A);
    const pb = ask(srv, B_TEXT);
    await until(srv, (s) => metric(s, M.running) === 2 && metric(s, M.waiting) === 1, 'one of A and B waits');
    await timedOut(v, new RegExp(`did not finish within ${TIMEOUT_S} s \\(--request-timeout-s\\)`), 'the long request');
    const [a, b] = await Promise.all([pa, pb]);
    sameAsAlone(a, alone.A, 'A beside a request that timed out');
    sameAsAlone(b, alone.B_TEXT, 'B beside a request that timed out');
    await afterwards(s0, 1);
  });

  test('a request past its deadline while waiting is answered without running', async () => {
    // Two requests hold the slots past the waiting one's deadline: sixteen
    // pictures, over thirty delayed pieces of prompt each (a prompt is not
    // cut midway, so they time out too, once their prompt is in).
    const s0 = await metrics(srv);
    const holder = (k) => [
      ...Array.from({ length: 16 }, (_, i) => [{ type: 'text', text: `Holder ${k}, picture ${i}:` },
        { type: 'image_url', image_url: { url: file('small.png').url } }]).flat(),
      { type: 'text', text: 'Describe them all.' },
    ];
    const h1 = rawChat(srv, { content: holder(1) });
    const h2 = rawChat(srv, { content: holder(2) });
    await until(srv, (s) => metric(s, M.running) === 2, 'the two holders run');
    const w = rawChat(srv, { content: WAITER });
    await until(srv, (s) => metric(s, M.waiting) === 1, 'the third request waits');
    await timedOut(w, new RegExp(`did not start within ${TIMEOUT_S} s \\(--request-timeout-s\\)`), 'the waiting request');
    const s1 = await metrics(srv);
    assert.equal(metric(s1, M.running), 2, 'the holders still ran when the waiting request timed out');
    const finish = new RegExp(`did not finish within ${TIMEOUT_S} s \\(--request-timeout-s\\)`);
    await timedOut(h1, finish, 'holder 1');
    await timedOut(h2, finish, 'holder 2');
    await afterwards(s0, 3);
  });
});

// ---- 3. Qwen3.5 under a mixed load ------------------------------------------------

describe(`a mixed load on ${QWEN35.id} (Qwen3.5)`, { timeout: 600_000 }, () => {
  let srv;
  before(async () => { srv = await startServer({ model: QWEN35 }); });
  after(() => stopServer(srv));

  test('two picture requests and two text requests at once, each as alone', async () => {
    const load = [
      { api: 'chat', text: 'What is in this picture?', image: file('grad.png'), n: 12 },
      { api: 'chat', stream: true, text: 'Count from one to five.', n: 12 },
      { api: 'chat', stream: true, text: 'Describe this picture.', image: made(6), n: 12 },
      { api: 'chat', text: 'Say hello in French.', n: 12 },
    ];
    const alone = [];
    for (const q of load) alone.push(await ask(srv, q));
    const s0 = await metrics(srv);
    const together = await Promise.all(load.map((q) => ask(srv, q)));
    for (let i = 0; i < load.length; i++) sameAsAlone(together[i], alone[i], `request ${i} (${label(load[i])})`);
    const s1 = await until(srv, idle, 'nothing runs or waits afterwards');
    assert.ok(metric(s1, M.shared) > metric(s0, M.shared), 'steps held rows of several requests');
  });
});
