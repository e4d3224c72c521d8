// Requests the server refuses, each with its status and an error body in
// the API's own shape; none of them disturbs the requests that follow.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import http from 'node:http';
import { after, before, describe, test } from 'node:test';

import {
  anthropic, anthropicError, chatResult, chatStream, checkAnthropicErrorBody, checkOpenAIErrorBody, imgPath,
  messagesResult, MODEL_ID, openai, openaiError, picture, post, reference, responsesResult, startServer, stopServer,
  toChat, user, withServer,
} from './helpers.mjs';

const N = 8;
const HELLO = [{ role: 'user', content: 'Say something.' }];
const DATA_ONLY = /only data: URIs are accepted/;

const chatImage = (url) => ({ type: 'image_url', image_url: { url } });
const chatWith = (...parts) => [{ role: 'user', content: [...parts, { type: 'text', text: 'What is it?' }] }];
const respWith = (...urls) => [{
  type: 'message', role: 'user',
  content: [...urls.map((u) => ({ type: 'input_image', image_url: u, detail: 'auto' })), { type: 'input_text', text: 'What is it?' }],
}];
const msgImage = (pic) => ({ type: 'image', source: { type: 'base64', media_type: pic.mime, data: pic.b64 } });
const msgWith = (...blocks) => [{ role: 'user', content: [...blocks, { type: 'text', text: 'What is it?' }] }];

// The same normal request each time: its greedy text must not change.
async function normal(srv) {
  const oa = openai(srv);
  const c = chatResult(await oa.chat.completions.create({ model: MODEL_ID, messages: HELLO, max_tokens: N, temperature: 0 }));
  const m = messagesResult(await anthropic(srv).messages.create({ model: MODEL_ID, messages: HELLO, max_tokens: N, temperature: 0 }));
  assert.equal(m.text, c.text);
  return c.text;
}

// Announces a body of `size` bytes (Content-Length) with "Expect:
// 100-continue" and sends it only if the server asks for it; resolves with
// the response. A server that refuses by the length answers at once.
function bigPost(srv, path, size) {
  return new Promise((resolve, reject) => {
    const t0 = Date.now();
    let res = null;
    const req = http.request(`${srv.url}${path}`, {
      method: 'POST', headers: { 'content-type': 'application/json', 'content-length': size, expect: '100-continue' },
    });
    req.on('response', (r) => {
      res = r;
      let body = '';
      r.setEncoding('utf8');
      r.on('data', (d) => { body += d; });
      r.on('close', () => resolve({ status: r.statusCode, body, ms: Date.now() - t0, sent: req.bodySent }));
    });
    req.on('continue', () => {
      req.bodySent = true;
      const body = Buffer.alloc(size, 0x20);
      body.write(`{"model":"${MODEL_ID}","messages":[{"role":"user","content":"`);
      req.end(body);
    });
    req.on('error', (e) => { if (!res) reject(new Error(`${path}: no response before the connection failed: ${e.message}`)); });
    req.flushHeaders();
  });
}

// Sends a body of `size` bytes in chunked transfer encoding (no
// Content-Length), 64 KiB at a time with a pause of 10 ms after each so that a
// response is read as soon as it comes; resolves with the response.
function chunkedPost(srv, path, size) {
  return new Promise((resolve, reject) => {
    let res = null;
    const req = http.request(`${srv.url}${path}`, {
      method: 'POST', headers: { 'content-type': 'application/json', 'transfer-encoding': 'chunked' },
    });
    req.on('response', (r) => {
      res = r;
      let body = '';
      r.setEncoding('utf8');
      r.on('data', (d) => { body += d; });
      r.on('close', () => resolve({ status: r.statusCode, body }));
    });
    req.on('error', (e) => { if (!res) reject(new Error(`${path}: no response before the connection failed: ${e.message}`)); });
    const chunk = Buffer.alloc(64 * 1024, 0x20);
    let sent = 0;
    const next = () => {
      if (res || req.destroyed) return;
      if (sent >= size) { req.end(); return; }
      sent += chunk.length;
      req.write(chunk, () => setTimeout(next, 10));
    };
    next();
  });
}

describe('refusals', { timeout: 300_000 }, () => {
  let srv;
  let baseline;
  before(async () => {
    srv = await startServer({ extra: ['--max-images', '2'] });
    baseline = await normal(srv);
  });
  after(() => stopServer(srv));

  test('pictures by URL or path: 400 "only data: URIs are accepted"', async () => {
    const oa = openai(srv);
    const an = anthropic(srv);
    for (const url of ['https://example.com/cat.png', 'http://127.0.0.1:1/cat.png', imgPath('small.png'), `file://${imgPath('small.png')}`]) {
      await openaiError(oa.chat.completions.create({ model: MODEL_ID, messages: chatWith(chatImage(url)), max_tokens: N }), 400, DATA_ONLY);
      await openaiError(oa.responses.create({ model: MODEL_ID, input: respWith(url), max_output_tokens: N }), 400, DATA_ONLY);
    }
    await openaiError(oa.chat.completions.create({
      model: MODEL_ID, messages: chatWith(chatImage('https://example.com/cat.png')), max_tokens: N, stream: true,
    }), 400, DATA_ONLY);
    await anthropicError(an.messages.create({
      model: MODEL_ID, max_tokens: N, messages: msgWith({ type: 'image', source: { type: 'url', url: 'https://example.com/cat.png' } }),
    }), 400, 'invalid_request_error', DATA_ONLY);
  });

  test('a data: URI that is not a picture type or not base64: 400 naming the field', async () => {
    const p = picture('small.png');
    const oa = openai(srv);
    const an = anthropic(srv);
    const NOT_PICTURE = /not a picture type .*image\/png, image\/jpeg, image\/webp, image\/gif/;
    for (const [url, re] of [
      [`data:text/html;base64,${p.b64}`, /'text\/html'/],
      [`data:application/octet-stream;base64,${p.b64}`, /'application\/octet-stream'/],
      [`data:;base64,${p.b64}`, /''/],
      [`data:image/pngx;base64,${p.b64}`, /'image\/pngx'/],
      [`data:image/svg+xml;base64,${p.b64}`, /'image\/svg\+xml'/],
    ]) {
      for (const stream of [false, true]) {
        await openaiError(oa.chat.completions.create({ model: MODEL_ID, messages: chatWith(chatImage(url)), max_tokens: N, stream }),
                          400, /messages\[0\]\.content\[0\]\.image_url\.url: /);
      }
      await openaiError(oa.chat.completions.create({ model: MODEL_ID, messages: chatWith(chatImage(url)), max_tokens: N }), 400, NOT_PICTURE);
      await openaiError(oa.chat.completions.create({ model: MODEL_ID, messages: chatWith(chatImage(url)), max_tokens: N }), 400, re);
      await openaiError(oa.responses.create({ model: MODEL_ID, input: respWith(url), max_output_tokens: N }), 400,
                        /input\[0\]\.content\[0\]\.image_url: .*not a picture type/);
      await anthropicError(an.messages.create({ model: MODEL_ID, max_tokens: N, messages: msgWith({ type: 'image', source: { type: 'url', url } }) }),
                           400, 'invalid_request_error', /messages\[0\]\.content\[0\]\.source\.url: .*not a picture type/);
    }
    // not base64: refused, whatever the type says
    for (const url of [`data:image/png,${p.b64}`, `data:image/png;charset=utf-8,${p.b64}`, 'data:image/png;base64x,AAAA']) {
      await openaiError(oa.chat.completions.create({ model: MODEL_ID, messages: chatWith(chatImage(url)), max_tokens: N }), 400,
                        /messages\[0\]\.content\[0\]\.image_url\.url: .*only base64 data: URIs are accepted/);
      await openaiError(oa.responses.create({ model: MODEL_ID, input: respWith(url), max_output_tokens: N }), 400, /only base64/);
    }
    // the string form of image_url names the field without ".url"
    await openaiError(oa.chat.completions.create({
      model: MODEL_ID, messages: chatWith({ type: 'image_url', image_url: `data:text/plain;base64,${p.b64}` }), max_tokens: N,
    }), 400, /messages\[0\]\.content\[0\]\.image_url: .*'text\/plain'/);
    // Anthropic's media_type is checked the same way
    for (const mt of ['text/html', 'image/svg+xml', '', 'png']) {
      await anthropicError(an.messages.create({
        model: MODEL_ID, max_tokens: N, messages: msgWith({ type: 'image', source: { type: 'base64', media_type: mt, data: p.b64 } }),
      }), 400, 'invalid_request_error', /messages\[0\]\.content\[0\]\.source\.media_type: .*not a picture type/);
    }
    // the second picture is the one named
    await openaiError(oa.chat.completions.create({
      model: MODEL_ID, messages: chatWith(chatImage(p.url), chatImage(`data:text/html;base64,${p.b64}`)), max_tokens: N,
    }), 400, /messages\[0\]\.content\[1\]\.image_url\.url/);
    // case and parameters do not matter
    const odd = `data:IMAGE/PNG;name=small.png;BASE64,${p.b64}`;
    assert.ok(chatResult(await oa.chat.completions.create({ model: MODEL_ID, messages: chatWith(chatImage(odd)), max_tokens: 2 })).prompt > 0);
    assert.ok(responsesResult(await oa.responses.create({ model: MODEL_ID, input: respWith(odd), max_output_tokens: 2 })));
    assert.ok(messagesResult(await an.messages.create({
      model: MODEL_ID, max_tokens: 2, messages: msgWith({ type: 'image', source: { type: 'base64', media_type: 'Image/Png', data: p.b64 } }),
    })));
    assert.equal(await normal(srv), baseline);
  });

  test('a bad content part: 400 naming it by its path, nested ones included', async () => {
    const oa = openai(srv);
    const an = anthropic(srv);
    const user = (content) => [{ role: 'user', content }];
    await openaiError(oa.chat.completions.create({ model: MODEL_ID, max_tokens: N, messages: user([{ type: 'text', text: 'a' }, { type: 'text', text: 5 }]) }),
                      400, /messages\[0\]\.content\[1\]\.text must be a string/);
    await openaiError(oa.chat.completions.create({ model: MODEL_ID, max_tokens: N, messages: user([7]) }),
                      400, /messages\[0\]\.content\[0\] must be an object with a 'type'/);
    await openaiError(oa.chat.completions.create({ model: MODEL_ID, max_tokens: N, messages: user([{ type: 'refusal' }]) }),
                      400, /messages\[0\]\.content\[0\]\.refusal must be a string/);
    await openaiError(oa.responses.create({ model: MODEL_ID, max_output_tokens: N, input: [{ role: 'user', content: [{ type: 'input_text', text: 1 }] }] }),
                      400, /input\[0\]\.content\[0\]\.text must be a string/);
    await openaiError(oa.responses.create({ model: MODEL_ID, max_output_tokens: N, input: [{ type: 'function_call_output', call_id: 'c', output: 3 }] }),
                      400, /input\[0\]\.output must be a string or an array of parts/);
    await anthropicError(an.messages.create({ model: MODEL_ID, max_tokens: N, messages: user([{ type: 'text', text: 'a' }, { type: 'text' }]) }),
                         400, 'invalid_request_error', /messages\[0\]\.content\[1\]\.text must be a string/);
    await anthropicError(an.messages.create({
      model: MODEL_ID, max_tokens: N,
      messages: [{ role: 'user', content: 'Call it.' }, { role: 'assistant', content: [{ type: 'tool_use', id: 't1', name: 'f', input: {} }] },
                 { role: 'user', content: [{ type: 'tool_result', tool_use_id: 't1', content: [{ type: 'text', text: 'ok' }, { type: 'text', text: 3 }] }] }],
    }), 400, 'invalid_request_error', /messages\[2\]\.content\[0\]\.content\[1\]\.text must be a string/);
    await anthropicError(an.messages.create({
      model: MODEL_ID, max_tokens: N, messages: [{ role: 'user', content: 'x' }, { role: 'assistant', content: [{ type: 'tool_use', id: 't', name: 'f', input: 1 }] }],
    }), 400, 'invalid_request_error', /messages\[1\]\.content\[0\]\.input must be an object/);
    await anthropicError(an.messages.create({ model: MODEL_ID, max_tokens: N, messages: HELLO, system: [{ type: 'text', text: 1 }] }),
                         400, 'invalid_request_error', /system\[0\]\.text must be a string/);
    assert.equal(await normal(srv), baseline);
  });

  test('more pictures than --max-images: 400 naming the limit', async () => {
    const p = picture('small.png');
    const oa = openai(srv);
    await openaiError(oa.chat.completions.create({
      model: MODEL_ID, messages: chatWith(chatImage(p.url), chatImage(p.url), chatImage(p.url)), max_tokens: N,
    }), 400, /\b2\b/);
    await openaiError(oa.responses.create({ model: MODEL_ID, input: respWith(p.url, p.url, p.url), max_output_tokens: N }), 400, /\b2\b/);
    await anthropicError(anthropic(srv).messages.create({
      model: MODEL_ID, max_tokens: N, messages: msgWith(msgImage(p), msgImage(p), msgImage(p)),
    }), 400, 'invalid_request_error', /\b2\b/);
    // pictures spread over several messages count together
    await openaiError(oa.chat.completions.create({
      model: MODEL_ID, max_tokens: N,
      messages: [...chatWith(chatImage(p.url), chatImage(p.url)), { role: 'assistant', content: 'ok' }, ...chatWith(chatImage(p.url))],
    }), 400, /\b2\b/);
    // the limit itself is fine
    const r = chatResult(await oa.chat.completions.create({
      model: MODEL_ID, messages: chatWith(chatImage(p.url), chatImage(p.url)), max_tokens: 2,
    }));
    assert.ok(r.prompt > 0);
  });

  test('a corrupt picture: 400', async () => {
    const bytes = readFileSync(imgPath('small.png'));
    const bad = picture('small.png', bytes.subarray(0, Math.floor(bytes.length / 2)));
    const junk = picture('x.png', Buffer.from('this is not a picture at all'));
    const oa = openai(srv);
    for (const p of [bad, junk]) {
      await openaiError(oa.chat.completions.create({ model: MODEL_ID, messages: chatWith(chatImage(p.url)), max_tokens: N }), 400);
      await openaiError(oa.responses.create({ model: MODEL_ID, input: respWith(p.url), max_output_tokens: N }), 400);
      await anthropicError(anthropic(srv).messages.create({ model: MODEL_ID, max_tokens: N, messages: msgWith(msgImage(p)) }),
                           400, 'invalid_request_error');
    }
    await openaiError(oa.chat.completions.create({
      model: MODEL_ID, messages: chatWith(chatImage('data:image/png;base64,@@not base64@@')), max_tokens: N,
    }), 400);
    // the cut file's header is sound: the worker finds it out, before a stream begins
    await openaiError(oa.chat.completions.create({
      model: MODEL_ID, messages: chatWith(chatImage(bad.url)), max_tokens: N, stream: true,
    }), 400, /^picture 1: PNG data is truncated/);
  });

  test('bad JSON: 400 in each API\'s error shape', async () => {
    for (const path of ['/v1/chat/completions', '/v1/responses', '/v1/messages']) {
      for (const body of ['{"model": "x", "messages": [', 'not json', '']) {
        const r = await post(srv, path, body);
        assert.equal(r.status, 400, `${path} ${JSON.stringify(body)}`);
        assert.ok(r.json, `${path}: the error body is JSON: ${r.text}`);
        if (path === '/v1/messages') checkAnthropicErrorBody(r.json, 'invalid_request_error');
        else checkOpenAIErrorBody(r.json);
      }
    }
  });

  test('wrong types and values: 400', async () => {
    const failed = []; // every case is tried; the failures are listed together
    const oa = openai(srv);
    const an = anthropic(srv);
    const chat = {
      'messages a string': { messages: 'hello' },
      'messages empty': { messages: [] },
      'a message without content': { messages: [{ role: 'user' }] },
      'an unknown role': { messages: [{ role: 'wizard', content: 'hi' }] },
      'content a number': { messages: [{ role: 'user', content: 42 }] },
      'an unknown part type': { messages: [{ role: 'user', content: [{ type: 'bogus', text: 'x' }] }] },
      'max_tokens a string': { max_tokens: '16' },
      'max_tokens negative': { max_tokens: -1 },
      'temperature 5': { temperature: 5 },
      'temperature a string': { temperature: 'hot' },
      'top_p 1.5': { top_p: 1.5 },
      'top_logprobs 50': { logprobs: true, top_logprobs: 50 },
      'stop a number': { stop: 7 },
      'a tool of another type': { tools: [{ type: 'web_search', function: { name: 'f' } }] },
      'a function tool without its function': { tools: [{ type: 'function', name: 'f' }] },
      'tools an object': { tools: { type: 'function' } },
      'tool_choice naming no declared tool': { tools: [{ type: 'function', function: { name: 'f' } }], tool_choice: { type: 'function', function: { name: 'g' } } },
      'tool_choice a bad word': { tools: [{ type: 'function', function: { name: 'f' } }], tool_choice: 'always' },
    };
    for (const [what, o] of Object.entries(chat)) {
      await openaiError(oa.chat.completions.create({ model: MODEL_ID, messages: HELLO, max_tokens: N, ...o }), 400)
        .catch((e) => failed.push(`chat completions, ${what}: ${e.message}`));
    }
    const resp = {
      'input a number': { input: 42 },
      'max_output_tokens a string': { max_output_tokens: 'x' },
      'temperature 3': { temperature: 3 },
      'a built-in tool': { tools: [{ type: 'web_search_preview' }] },
      'a tool without a type': { tools: [{ name: 'f' }] },
      'tool_choice in the chat shape without a name': { tools: [{ type: 'function', name: 'f' }], tool_choice: { type: 'function', function: { name: 'f' } } },
    };
    for (const [what, o] of Object.entries(resp)) {
      await openaiError(oa.responses.create({ model: MODEL_ID, input: 'hi', max_output_tokens: N, ...o }), 400)
        .catch((e) => failed.push(`responses, ${what}: ${e.message}`));
    }
    const msg = {
      'messages a string': { messages: 'hello' },
      'max_tokens a string': { max_tokens: '16' },
      'max_tokens missing (required)': { max_tokens: undefined },
      'temperature 1.5 (range 0..1)': { temperature: 1.5 },
      'stop_sequences a string': { stop_sequences: 'x' },
      'a developer role message': { messages: [{ role: 'developer', content: 'hi' }] },
      'a server tool': { tools: [{ type: 'web_search_20250305', name: 'web_search' }] },
      'a tool without a name': { tools: [{ input_schema: { type: 'object' } }] },
    };
    for (const [what, o] of Object.entries(msg)) {
      await anthropicError(an.messages.create({ model: MODEL_ID, messages: HELLO, max_tokens: N, ...o }), 400, 'invalid_request_error')
        .catch((e) => failed.push(`messages, ${what}: ${e.message}`));
    }
    assert.deepEqual(failed, []);
  });

  test('a 400 names the field at fault in error.param, as OpenAI does (null when no one field is)', async () => {
    const oa = openai(srv);
    const param = async (promise, want, re = /./) => {
      const e = await openaiError(promise, 400, re);
      assert.equal(e.error.param ?? e.param, want, `param of "${e.message}"`);
    };
    const chat = (o) => oa.chat.completions.create({ model: MODEL_ID, messages: HELLO, max_tokens: N, ...o });
    const resp = (o) => oa.responses.create({ model: MODEL_ID, input: 'hi', max_output_tokens: N, ...o });
    await param(chat({ messages: chatWith(chatImage('https://example.com/cat.png')) }), 'messages[0].content[0].image_url.url');
    await param(chat({ messages: chatWith(chatImage('https://example.com/cat.png')), stream: true }), 'messages[0].content[0].image_url.url');
    await param(chat({ messages: [...HELLO, { role: 'wizard', content: 'x' }] }), 'messages[1].role');
    await param(chat({ messages: [{ role: 'user', content: [{ type: 'text', text: 5 }] }] }), 'messages[0].content[0].text');
    await param(chat({ tools: [{ type: 'function', function: { name: 'bad name' } }] }), 'tools[0].function.name');
    await param(chat({ temperature: 5 }), 'temperature');
    await param(chat({ messages: [] }), 'messages', /'messages' is empty/);
    await param(chat({ stream_options: { include_usage: 3 }, stream: true }), 'stream_options.include_usage');
    await param(chat({ messages: [...HELLO, { role: 'assistant', tool_calls: [{ id: 'c', type: 'function', function: { name: '', arguments: '{}' } }] }] }),
                'messages[1].tool_calls[0].function.name');
    await param(resp({ input: respWith('https://example.com/cat.png') }), 'input[0].content[0].image_url');
    await param(resp({ tools: [{ type: 'function', name: 'a.b' }] }), 'tools[0].name');
    await param(resp({ reasoning: { effort: 'extreme' } }), 'reasoning.effort');
    // Responses with an empty input says so in its own words
    await param(resp({ input: [] }), 'input', /'input' is empty/);
    // no one field: null
    const r = await post(srv, '/v1/chat/completions', 'not json');
    assert.equal(r.status, 400);
    assert.equal(r.json.error.param, null);
  });

  test('tool names: 1 to 64 of [A-Za-z0-9_-], as OpenAI and Anthropic take them; others 400 naming the tool', async () => {
    const oa = openai(srv);
    const an = anthropic(srv);
    const ok64 = 'a'.repeat(63) + 'Z';
    for (const name of [ok64, 'get-weather_2']) {
      const tools = [{ type: 'function', function: { name, parameters: { type: 'object' } } }];
      assert.ok(chatResult(await oa.chat.completions.create({ model: MODEL_ID, messages: HELLO, max_tokens: 2, tools })).prompt > 0, name);
      assert.ok(responsesResult(await oa.responses.create({ model: MODEL_ID, input: 'hi', max_output_tokens: 2, tools: [{ type: 'function', name }] })));
      assert.ok(messagesResult(await an.messages.create({ model: MODEL_ID, messages: HELLO, max_tokens: 2, tools: [{ name, input_schema: { type: 'object' } }] })));
    }
    for (const name of [`${ok64}x`, 'a'.repeat(5000), 'get.weather', 'get weather', 'wetter\u00e9']) {
      const what = JSON.stringify(name.length > 80 ? `${name.slice(0, 8)}... (${name.length})` : name);
      const e = await openaiError(oa.chat.completions.create({
        model: MODEL_ID, messages: HELLO, max_tokens: N, tools: [{ type: 'function', function: { name } }],
      }), 400, /tools\[0\]\.function\.name .*not a tool name: 1 to 64 letters, digits, '_' or '-'/);
      assert.ok(e.message.length < 400, `${what}: the message quotes a bounded part of the name`);
      await openaiError(oa.responses.create({ model: MODEL_ID, input: 'hi', max_output_tokens: N, tools: [{ type: 'function', name }] }),
                        400, /tools\[0\]\.name .*not a tool name/);
      await anthropicError(an.messages.create({ model: MODEL_ID, messages: HELLO, max_tokens: N, tools: [{ name, input_schema: { type: 'object' } }] }),
                           400, 'invalid_request_error', /tools\[0\]\.name .*not a tool name/);
    }
  });

  test('n: a number equal to 1 (1, 1.0) is one answer; any other is refused', async () => {
    for (const n of ['1', '1.0', '1e0']) {
      const r = await post(srv, '/v1/chat/completions', `{"model": "${MODEL_ID}", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2, "n": ${n}}`);
      assert.equal(r.status, 200, `n: ${n}: ${r.text}`);
      assert.equal(r.json.choices.length, 1);
    }
    for (const n of ['2', '1.5', '0', '"1"', 'true']) {
      const r = await post(srv, '/v1/chat/completions', `{"model": "${MODEL_ID}", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2, "n": ${n}}`);
      assert.equal(r.status, 400, `n: ${n}`);
      assert.match(r.json.error.message, /'n' must be 1/);
    }
  });

  test('JSON errors in this server\'s words: never a flag of the JSON library', async () => {
    const bodies = {
      'a key holding \\u0000': [`{"model": "${MODEL_ID}", "max_tokens": 2, "messages": [{"role": "user", "content": "hi", "a\\u0000b": 1}]}`, /key holds \\u0000/],
      'a repeated key': [`{"model": "${MODEL_ID}", "max_tokens": 2, "max_tokens": 3, "messages": []}`, /the same key twice/],
      'cut short': ['{"messages": [', /ends before its value does/],
      'more after the value': ['{} {}', /more follows its value/],
      'not UTF-8': [Buffer.from([0x7b, 0x22, 0xff, 0x22, 0x3a, 0x31, 0x7d]), /not valid UTF-8/],
      'nested too deeply': ['['.repeat(5000), /too deeply/],
    };
    for (const path of ['/v1/chat/completions', '/v1/responses', '/v1/messages']) {
      for (const [what, [body, re]] of Object.entries(bodies)) {
        const r = await fetch(srv.url + path, { method: 'POST', headers: { 'content-type': 'application/json' }, body }).then(async (x) => ({ status: x.status, json: await x.json() }));
        assert.equal(r.status, 400, `${path} ${what}`);
        const msg = path === '/v1/messages' ? r.json.error.message : r.json.error.message;
        assert.match(msg, /^the body is not valid JSON: /, `${path} ${what}: ${msg}`);
        assert.match(msg, re, `${path} ${what}: ${msg}`);
        assert.doesNotMatch(msg, /JSON_[A-Z]|ALLOW_NUL|REJECT_DUPLICATES/, `${path} ${what}: no flag of the library: ${msg}`);
      }
    }
    // a NUL in a string is text like any other; a name cannot hold one
    const r = await post(srv, '/v1/chat/completions', `{"model": "${MODEL_ID}", "max_tokens": 2, "messages": [{"role": "user", "content": "a\\u0000b"}]}`);
    assert.equal(r.status, 200, r.text);
    await openaiError(openai(srv).chat.completions.create({
      model: MODEL_ID, messages: HELLO, max_tokens: N, tools: [{ type: 'function', function: { name: 'a\u0000b' } }],
    }), 400, /tools\[0\]\.function\.name .*not a tool name/);
  });

  test('a body over --max-body-mb: 413 before it is read', async () => {
    const size = 65 * 1024 * 1024;
    const r = await bigPost(srv, '/v1/chat/completions', size);
    assert.equal(r.status, 413, r.body);
    assert.ok(r.ms < 10_000, `413 after ${r.ms} ms`);
    assert.ok(!r.sent, 'refused by its Content-Length, without asking for the body (100 Continue)');
    checkOpenAIErrorBody(JSON.parse(r.body));
    const m = await bigPost(srv, '/v1/messages', size);
    assert.equal(m.status, 413, m.body);
    checkAnthropicErrorBody(JSON.parse(m.body), 'request_too_large');
  });

  // The clients send the whole body without waiting; the server answers
  // before reading it, and must not reset the connection under the client
  // (RFC 9112 9.6: close in stages), or the client sees a connection error
  // instead of the 413.
  test('a body over --max-body-mb from the official clients: 413, not a connection error', async () => {
    const big = 'a'.repeat(65 * 1024 * 1024);
    for (let i = 0; i < 3; i++) {
      await openaiError(openai(srv).chat.completions.create({ model: MODEL_ID, messages: [{ role: 'user', content: big }], max_tokens: N }), 413);
      await anthropicError(anthropic(srv).messages.create({ model: MODEL_ID, messages: [{ role: 'user', content: big }], max_tokens: N }),
                           413, 'request_too_large');
    }
  });

  test('refusals while a stream runs do not disturb it', async () => {
    const conv = { turns: [user('Tell me about refusals.')] };
    const ref = await reference(conv, 160);
    const streamed = openai(srv).chat.completions.create({
      model: MODEL_ID, messages: toChat(conv), max_tokens: 160, temperature: 0, stream: true,
      stream_options: { include_usage: true },
    }).then(chatStream);
    const bad = picture('small.png', Buffer.from('not a picture'));
    await Promise.all([
      post(srv, '/v1/chat/completions', '{"messages": [').then((r) => assert.equal(r.status, 400)),
      post(srv, '/v1/messages', { model: MODEL_ID, max_tokens: 4, messages: msgWith(msgImage(bad)) }).then((r) => assert.equal(r.status, 400)),
      post(srv, '/v1/responses', { model: MODEL_ID, input: respWith('https://example.com/a.png') }).then((r) => assert.equal(r.status, 400)),
      bigPost(srv, '/v1/chat/completions', 65 * 1024 * 1024).then((r) => assert.equal(r.status, 413)),
      post(srv, '/v1/nowhere', {}).then((r) => assert.equal(r.status, 404)),
    ]);
    const r = await streamed;
    assert.equal(r.text, ref.text);
    assert.equal(r.completion, ref.nTokens);
  });

  test('after all that, a normal request gives the same text', async () => {
    assert.equal(await normal(srv), baseline);
  });
});

describe('refusals of other servers', { timeout: 300_000 }, () => {
  test('--max-body-mb 1: 413 by Content-Length and for a chunked body; a body under it is read', async () => {
    await withServer({ extra: ['--max-body-mb', '1'] }, async (srv) => {
      const r = await bigPost(srv, '/v1/chat/completions', 2 * 1024 * 1024);
      assert.equal(r.status, 413, r.body);
      checkOpenAIErrorBody(JSON.parse(r.body));
      const c = await chunkedPost(srv, '/v1/chat/completions', 2 * 1024 * 1024);
      assert.equal(c.status, 413, c.body);
      checkOpenAIErrorBody(JSON.parse(c.body));
      const m = await chunkedPost(srv, '/v1/messages', 2 * 1024 * 1024);
      assert.equal(m.status, 413, m.body);
      checkAnthropicErrorBody(JSON.parse(m.body), 'request_too_large');
      // 0.9 MiB of JSON (mostly white space) is under the limit
      const body = `{"model":"${MODEL_ID}","max_tokens":2,${' '.repeat(900 * 1024)}"messages":[{"role":"user","content":"hi"}]}`;
      const ok = await post(srv, '/v1/chat/completions', body);
      assert.equal(ok.status, 200, ok.text);
      assert.equal(ok.json.object, 'chat.completion');
    });
  });

  test('a prompt longer than the context (-c 128): 400', async () => {
    await withServer({ extra: ['-c', '128'] }, async (srv) => {
      const long = 'word '.repeat(400);
      const oa = openai(srv);
      await openaiError(oa.chat.completions.create({ model: MODEL_ID, messages: [{ role: 'user', content: long }], max_tokens: N }), 400);
      await openaiError(oa.responses.create({ model: MODEL_ID, input: long, max_output_tokens: N }), 400);
      await anthropicError(anthropic(srv).messages.create({ model: MODEL_ID, max_tokens: N, messages: [{ role: 'user', content: long }] }),
                           400, 'invalid_request_error');
      const r = chatResult(await oa.chat.completions.create({ model: MODEL_ID, messages: HELLO, max_tokens: N, temperature: 0 }));
      assert.ok(r.prompt > 0);
    });
  });

  test('a picture to a server without --mmproj: 400', async () => {
    await withServer({ vision: false }, async (srv) => {
      const p = picture('small.png');
      const oa = openai(srv);
      await openaiError(oa.chat.completions.create({ model: MODEL_ID, messages: chatWith(chatImage(p.url)), max_tokens: N }), 400);
      await openaiError(oa.responses.create({ model: MODEL_ID, input: respWith(p.url), max_output_tokens: N }), 400);
      await anthropicError(anthropic(srv).messages.create({ model: MODEL_ID, max_tokens: N, messages: msgWith(msgImage(p)) }),
                           400, 'invalid_request_error');
      const r = chatResult(await oa.chat.completions.create({ model: MODEL_ID, messages: HELLO, max_tokens: N, temperature: 0 }));
      assert.ok(r.prompt > 0);
    });
  });

  test('--api-key: no key or a wrong key is 401, the right key works', async () => {
    const KEY = 'sk-test-pinhole-0123';
    await withServer({ extra: ['--api-key', KEY] }, async (srv) => {
      const chatBody = { model: MODEL_ID, messages: HELLO, max_tokens: 2 };
      const msgBody = { model: MODEL_ID, messages: HELLO, max_tokens: 2 };
      // no key at all
      for (const [path, body] of [['/v1/chat/completions', chatBody], ['/v1/responses', { model: MODEL_ID, input: 'hi' }], ['/v1/messages', msgBody]]) {
        const r = await post(srv, path, body);
        assert.equal(r.status, 401, `${path} without a key`);
        if (path === '/v1/messages') checkAnthropicErrorBody(r.json, 'authentication_error');
        else checkOpenAIErrorBody(r.json);
      }
      // wrong keys through the clients
      await openaiError(openai(srv, { apiKey: 'sk-wrong' }).chat.completions.create(chatBody), 401);
      await openaiError(openai(srv, { apiKey: 'sk-wrong' }).responses.create({ model: MODEL_ID, input: 'hi', max_output_tokens: 2 }), 401);
      await anthropicError(anthropic(srv, { apiKey: 'sk-wrong' }).messages.create(msgBody), 401, 'authentication_error');
      await openaiError(openai(srv, { apiKey: `${KEY}x` }).chat.completions.create(chatBody), 401);
      // the right key: Authorization: Bearer (OpenAI client), x-api-key (Anthropic client), and each the other way round
      assert.ok(chatResult(await openai(srv, { apiKey: KEY }).chat.completions.create(chatBody)).prompt > 0);
      assert.ok(responsesResult(await openai(srv, { apiKey: KEY }).responses.create({ model: MODEL_ID, input: 'hi', max_output_tokens: 2 })).prompt > 0);
      assert.ok(messagesResult(await anthropic(srv, { apiKey: KEY }).messages.create(msgBody)).prompt > 0);
      assert.equal((await post(srv, '/v1/chat/completions', chatBody, { 'x-api-key': KEY })).status, 200);
      assert.equal((await post(srv, '/v1/messages', msgBody, { authorization: `Bearer ${KEY}` })).status, 200);
    });
  });
});
