// No request field is dropped silently: each field a client commonly sends
// is honoured (its effect visible here) or refused with a 400 naming it;
// fields that are accepted and ignored by design (user, metadata, ...) are
// listed in docs/api-fields.md. A field the server does not know (newer
// than it, or a client's own) is accepted and ignored visibly: named in the
// X-Pinhole-Ignored-Fields header, counted in
// pinhole_request_fields_ignored_total, logged once; --strict-fields
// refuses it. Every field the official clients declare is in one of the
// server's lists.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';

import { anthropic, metric, metrics, MODEL_ID, openai, post, startServer, stopServer } from './helpers.mjs';
import { SDK_APIS, sdkFields } from './sdk-fields.mjs';

const N = 12;
const ASK = [{ role: 'user', content: 'Tell me about the river.' }];
let srv;
before(async () => { srv = await startServer({ vision: false }); });
after(async () => { await stopServer(srv); });

const chat = async (extra) => {
  const r = await openai(srv).chat.completions.create({ model: MODEL_ID, messages: ASK, max_tokens: N, logprobs: true, ...extra });
  return { text: r.choices[0].message.content, tokens: r.choices[0].logprobs.content.map((t) => t.token) };
};
const refused = async (path, body, re) => {
  const r = await post(srv, path, body);
  assert.equal(r.status, 400, `${JSON.stringify(body).slice(0, 120)}: ${r.text}`);
  const msg = r.json?.error?.message ?? '';
  assert.match(msg, re);
};
const chatBody = (extra) => ({ model: MODEL_ID, messages: ASK, max_tokens: 4, ...extra });
const respBody = (extra) => ({ model: MODEL_ID, input: 'Hi.', max_output_tokens: 4, ...extra });
const msgBody = (extra) => ({ model: MODEL_ID, messages: ASK, max_tokens: 4, ...extra });

describe('request fields', { timeout: 300_000 }, () => {
  test('top_k and min_p: 1 leaves only the most likely token (the greedy answer at temperature 1)', async () => {
    const greedy = await chat({ temperature: 0 });
    assert.deepEqual((await chat({ temperature: 1, top_k: 1, seed: 3 })).tokens, greedy.tokens, 'top_k 1');
    assert.deepEqual((await chat({ temperature: 1, min_p: 1, seed: 4 })).tokens, greedy.tokens, 'min_p 1');
    assert.notDeepEqual((await chat({ temperature: 1.5, seed: 5 })).tokens, greedy.tokens, 'without them, sampling differs');
  });

  test('penalties: a repeated token loses its place in a greedy answer', async () => {
    const greedy = await chat({ temperature: 0, max_tokens: 32 });
    const repeats = (t) => t.length - new Set(t).size;
    assert.ok(repeats(greedy.tokens) > 0, `the plain greedy answer repeats a token: ${greedy.tokens}`);
    for (const p of [{ presence_penalty: 2 }, { frequency_penalty: 2 }, { repetition_penalty: 10 }]) {
      const r = await chat({ temperature: 0, max_tokens: 32, ...p });
      assert.ok(repeats(r.tokens) < repeats(greedy.tokens), `${JSON.stringify(p)}: fewer repeats (${repeats(r.tokens)})`);
    }
  });

  test('logit_bias: -100 bans a token, +100 forces one', async () => {
    const first = async (bias, n = 1) => {
      const r = await post(srv, '/v1/chat/completions', chatBody({ max_tokens: n, temperature: 0, logit_bias: bias }));
      assert.equal(r.status, 200, r.text);
      return r.json.choices[0].message.content;
    };
    const a = await first({ 9707: 100, 9708: 90 });
    const b = await first({ 9707: -100, 9708: 90 });
    assert.notEqual(a, b, 'the banned token is not chosen');
    assert.equal(await first({ 9708: 90 }), b, 'the second token is what wins without the first');
    assert.equal(await first({ 9707: 100 }, 3), a.repeat(3), 'a +100 token is chosen every time');
    await refused('/v1/chat/completions', chatBody({ logit_bias: { 99999999: 1 } }), /logit_bias/);
    await refused('/v1/chat/completions', chatBody({ logit_bias: { 5: 500 } }), /logit_bias/);
  });

  test('accepted and ignored by design: user, metadata, safety_identifier, prompt_cache_key, service_tier', async () => {
    const plain = await chat({ temperature: 0 });
    const r = await chat({ temperature: 0, user: 'u1', metadata: { a: 'b' }, safety_identifier: 'x', prompt_cache_key: 'k', service_tier: 'auto' });
    assert.deepEqual(r.tokens, plain.tokens);
    const m = await anthropic(srv).messages.create({ model: MODEL_ID, messages: ASK, max_tokens: 4, metadata: { user_id: 'u1' },
      context_management: { edits: [] }, thinking: { type: 'adaptive' }, output_config: { effort: 'low' } });
    assert.equal(m.type, 'message');
    const rs = await openai(srv).responses.create({ model: MODEL_ID, input: 'Hi.', max_output_tokens: 4, user: 'u', metadata: { a: 'b' }, store: false });
    assert.equal(rs.status, 'incomplete');
  });

  test('reasoning switches: reasoning_effort, reasoning.effort, thinking are checked', async () => {
    assert.equal((await post(srv, '/v1/chat/completions', chatBody({ reasoning_effort: 'none' }))).status, 200);
    await refused('/v1/chat/completions', chatBody({ reasoning_effort: 'extreme' }), /reasoning_effort/);
    assert.equal((await post(srv, '/v1/responses', respBody({ reasoning: { effort: 'high' } }))).status, 200);
    await refused('/v1/responses', respBody({ reasoning: { effort: 1 } }), /reasoning\.effort/);
    assert.equal((await post(srv, '/v1/messages', msgBody({ thinking: { type: 'disabled' } }))).status, 200);
    await refused('/v1/messages', msgBody({ thinking: { type: 'sometimes' } }), /thinking/);
  });

  test('refused with a 400 that names the field', async () => {
    await refused('/v1/responses', respBody({ previous_response_id: 'resp_1' }), /previous_response_id/);
    await refused('/v1/responses', respBody({ background: true }), /background/);
    await refused('/v1/chat/completions', chatBody({ audio: { voice: 'x', format: 'mp3' } }), /audio/);
    await refused('/v1/chat/completions', chatBody({ functions: [{ name: 'f' }] }), /functions/);
    await refused('/v1/chat/completions', chatBody({ store: true }), /store/);
    await refused('/v1/chat/completions', chatBody({ stream_options: { include_everything: true } }), /stream_options\.include_everything/);
    await refused('/v1/messages', msgBody({ mcp_servers: [{ type: 'url', url: 'http://x' }] }), /mcp_servers/);
    await refused('/v1/chat/completions', chatBody({ forced_output: 'x' }), /forced_output.*--allow-forced-output/);
    await refused('/v1/chat/completions', chatBody({ tools: [{ type: 'web_search' }] }), /tools\[0\]/);
    await refused('/v1/chat/completions', chatBody({ tool_choice: 'required' }), /tool_choice/);
  });

  test('unknown fields: answered 200, named in X-Pinhole-Ignored-Fields, counted per API and field', async () => {
    const before = await metrics(srv);
    const plain = await post(srv, '/v1/chat/completions', chatBody({ temperature: 0 }));
    assert.equal(plain.headers.get('x-pinhole-ignored-fields'), null, 'no header when nothing is ignored');
    const r = await post(srv, '/v1/chat/completions', chatBody({ temperature: 0, frobnicate: 1, client_metadata: { a: 1 } }));
    assert.equal(r.status, 200, r.text);
    assert.equal(r.headers.get('x-pinhole-ignored-fields'), 'frobnicate, client_metadata');
    assert.equal(r.json.choices[0].message.content, plain.json.choices[0].message.content, 'the answer is unchanged');
    for (const [path, body] of [['/v1/responses', respBody({ client_metadata: { x: 'y' } })],
      ['/v1/messages', msgBody({ client_metadata: {} })], ['/v1/messages/count_tokens', { model: MODEL_ID, messages: ASK, client_metadata: 1 }]]) {
      const x = await post(srv, path, body);
      assert.equal(x.status, 200, `${path}: ${x.text}`);
      assert.equal(x.headers.get('x-pinhole-ignored-fields'), 'client_metadata', path);
    }
    // streamed: the header comes with the stream's head
    const s = await fetch(srv.url + '/v1/chat/completions', { method: 'POST', headers: { 'content-type': 'application/json' },
      body: JSON.stringify(chatBody({ stream: true, client_metadata: 'x' })) });
    assert.equal(s.status, 200);
    assert.equal(s.headers.get('x-pinhole-ignored-fields'), 'client_metadata');
    assert.match(await s.text(), /data: \[DONE\]/);
    // a long and odd name is cut and made printable; many names end with "..."
    const odd = 'x'.repeat(100) + '\u00e9,"';
    const o = await post(srv, '/v1/chat/completions', chatBody({ [odd]: 1 }));
    assert.equal(o.status, 200, o.text);
    assert.equal(o.headers.get('x-pinhole-ignored-fields'), 'x'.repeat(64));
    const many = Object.fromEntries(Array.from({ length: 20 }, (_, i) => [`f${i}_${'y'.repeat(60)}`, i]));
    const mr = await post(srv, '/v1/chat/completions', chatBody(many));
    assert.equal(mr.status, 200, mr.text);
    assert.match(mr.headers.get('x-pinhole-ignored-fields'), /^f0_y+, f1_y+, .*, \.\.\.$/);
    const after = await metrics(srv);
    const n = (m, api, field) => metric(m, 'pinhole_request_fields_ignored_total', { api, field }) ?? 0;
    assert.equal(n(after, 'chat_completions', 'client_metadata') - n(before, 'chat_completions', 'client_metadata'), 2);
    assert.equal(n(after, 'chat_completions', 'frobnicate') - n(before, 'chat_completions', 'frobnicate'), 1);
    assert.equal(n(after, 'responses', 'client_metadata') - n(before, 'responses', 'client_metadata'), 1);
    assert.equal(n(after, 'messages', 'client_metadata') - n(before, 'messages', 'client_metadata'), 2);
    assert.equal(n(after, 'chat_completions', 'x'.repeat(64)), 1, 'a long name is cut to 64 bytes');
    // known fields that ask for something the server cannot do are still refused
    await refused('/v1/chat/completions', chatBody({ n: 2 }), /'n'/);
    await refused('/v1/chat/completions', chatBody({ audio: { voice: 'x', format: 'mp3' } }), /audio/);
  });

  test('--strict-fields: an unknown field is refused with 400 naming it', async () => {
    const strict = await startServer({ vision: false, extra: ['--strict-fields'] });
    try {
      for (const [path, body] of [['/v1/chat/completions', chatBody({ frobnicate: 1 })], ['/v1/responses', respBody({ frobnicate: 1 })],
        ['/v1/messages', msgBody({ frobnicate: 1 })]]) {
        const r = await post(strict, path, body);
        assert.equal(r.status, 400, `${path}: ${r.text}`);
        assert.match(r.json.error.message, /'frobnicate' is not known .*--strict-fields/);
      }
      assert.equal((await post(strict, '/v1/chat/completions', chatBody({ user: 'u' }))).status, 200, 'listed fields still pass');
    } finally { await stopServer(strict); }
  });

  test('every field the official clients declare is in one of the lists (honoured, ignored or refused)', async () => {
    const strict = await startServer({ vision: false, extra: ['--strict-fields'] });
    try {
      const base = { '/v1/chat/completions': chatBody({ max_tokens: 1 }), '/v1/responses': respBody({ max_output_tokens: 1 }),
        '/v1/messages': msgBody({ max_tokens: 1 }), '/v1/messages/count_tokens': { model: MODEL_ID, messages: ASK } };
      const unlisted = [];
      for (const e of SDK_APIS) {
        const fields = sdkFields(e);
        assert.ok(fields.length > 10, `${e.path}: the declarations were read (${fields})`);
        for (const f of fields) {
          // null asks for nothing: a listed field is taken, ignored or checked; only an unlisted one is "not known"
          const r = await post(strict, e.path, { ...base[e.path], [f]: null });
          if (r.status === 400 && /is not known/.test(r.text)) unlisted.push(`${e.path} ${f}`);
        }
      }
      assert.deepEqual(unlisted, [], 'fields the SDKs declare and no list has');
    } finally { await stopServer(strict); }
  });

  test('Anthropic: system entries inside messages join the system text', async () => {
    const an = anthropic(srv);
    const a = await an.messages.create({ model: MODEL_ID, system: 'Be brief.', messages: ASK, max_tokens: N, temperature: 0 });
    const b = await an.messages.create({ model: MODEL_ID, messages: [{ role: 'system', content: 'Be brief.' }, ...ASK], max_tokens: N, temperature: 0 });
    assert.equal(b.content[0].text, a.content[0].text);
    assert.equal(b.usage.input_tokens + b.usage.cache_read_input_tokens, a.usage.input_tokens + a.usage.cache_read_input_tokens);
  });

  test('Anthropic count_tokens: the prompt rows a request would have', async () => {
    const body = { model: MODEL_ID, system: 'Be brief.', messages: ASK };
    const c = await post(srv, '/v1/messages/count_tokens', body);
    assert.equal(c.status, 200, c.text);
    const m = await anthropic(srv).messages.create({ ...body, max_tokens: 1 });
    assert.equal(c.json.input_tokens, m.usage.input_tokens + m.usage.cache_read_input_tokens);
    const sdk = await anthropic(srv).messages.countTokens(body);
    assert.equal(sdk.input_tokens, c.json.input_tokens);
  });
});
