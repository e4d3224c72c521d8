// The request's `model`: only the served name (as /v1/models lists it) and
// the --alias names are accepted; any other gets 404 in each API's error
// shape (OpenAI model_not_found, Anthropic not_found_error). A request
// without `model` is served as before. --any-model accepts any name.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';

import {
  anthropic, anthropicError, checkAnthropicErrorBody, checkOpenAIErrorBody, get, MODEL_ID, openai, openaiError, post,
  startServer, stopServer,
} from './helpers.mjs';

const hi = 'Hi.';

// One short request of each API naming `model` (undefined: the field left out).
const chat = (srv, model) => openai(srv).chat.completions.create({ model, max_tokens: 1, messages: [{ role: 'user', content: hi }] });
const responses = (srv, model) => openai(srv).responses.create({ model, max_output_tokens: 1, input: hi });
const messages = (srv, model) => anthropic(srv).messages.create({ model, max_tokens: 1, messages: [{ role: 'user', content: hi }] });

// The raw bodies, for what the SDKs will not send.
const RAW = {
  '/v1/chat/completions': { max_tokens: 1, messages: [{ role: 'user', content: hi }] },
  '/v1/responses': { max_output_tokens: 1, input: hi },
  '/v1/messages': { max_tokens: 1, messages: [{ role: 'user', content: hi }] },
};

async function acceptedByAll(srv, model) {
  const c = await chat(srv, model);
  assert.equal(c.object, 'chat.completion', `chat completions accepts ${model}`);
  const r = await responses(srv, model);
  assert.equal(r.object, 'response', `responses accepts ${model}`);
  const m = await messages(srv, model);
  assert.equal(m.type, 'message', `messages accepts ${model}`);
  return [c.model, r.model, m.model];
}

async function refusedByAll(srv, model, served) {
  const re = new RegExp(`'${model}'.*'${served}'`);
  for (const call of [chat, responses]) {
    const err = await openaiError(call(srv, model), 404, re);
    assert.equal(err.code, 'model_not_found');
    assert.equal(err.param, 'model');
    assert.equal(err.type, 'invalid_request_error');
  }
  await anthropicError(messages(srv, model), 404, 'not_found_error', re);
}

describe('the model name (default: strict)', { timeout: 300_000 }, () => {
  let srv;
  before(async () => { srv = await startServer({ vision: false }); });
  after(() => stopServer(srv));

  test('the served name is accepted by all three APIs and answers carry it', async () => {
    assert.deepEqual(await acceptedByAll(srv, MODEL_ID), [MODEL_ID, MODEL_ID, MODEL_ID]);
  });

  test('another name: 404 in each API\'s shape, naming the model asked for and the one served', async () => {
    await refusedByAll(srv, 'gpt-4o', MODEL_ID);
    await refusedByAll(srv, 'tiny-f16.gguf', MODEL_ID);
    await refusedByAll(srv, 'TINY-F16', MODEL_ID); // names are compared exactly
  });

  test('a streamed request with another name gets the same 404 (not a stream)', async () => {
    for (const [path, body] of Object.entries(RAW)) {
      const r = await post(srv, path, { ...body, model: 'another-model', stream: true });
      assert.equal(r.status, 404, `${path}: ${r.text}`);
      assert.match(r.type, /^application\/json/);
      if (path === '/v1/messages') checkAnthropicErrorBody(r.json, 'not_found_error', /another-model/);
      else {
        checkOpenAIErrorBody(r.json, /another-model/);
        assert.equal(r.json.error.code, 'model_not_found');
      }
    }
  });

  test('without `model` (or with null) a request is served as before', async () => {
    for (const [path, body] of Object.entries(RAW)) {
      for (const b of [body, { ...body, model: null }]) {
        const r = await post(srv, path, b);
        assert.equal(r.status, 200, `${path} ${JSON.stringify(b)}: ${r.text}`);
      }
    }
  });

  test('a `model` that is not a string: 400', async () => {
    for (const [path, body] of Object.entries(RAW)) {
      const r = await post(srv, path, { ...body, model: 7 });
      assert.equal(r.status, 400, `${path}: ${r.text}`);
      if (path === '/v1/messages') checkAnthropicErrorBody(r.json, 'invalid_request_error', /model/);
      else checkOpenAIErrorBody(r.json, /model/);
    }
  });
});

describe('--alias, twice', { timeout: 300_000 }, () => {
  let srv;
  before(async () => { srv = await startServer({ vision: false, extra: ['--alias', 'first-name', '--alias', 'second-name'] }); });
  after(() => stopServer(srv));

  test('/v1/models shows the first alias', async () => {
    const page = await openai(srv).models.list();
    assert.deepEqual(page.data.map((m) => m.id), ['first-name']);
    for (const id of ['first-name', 'second-name']) {
      const r = await get(srv, `/v1/models/${id}`);
      assert.equal(r.status, 200, `/v1/models/${id}`);
      assert.equal(JSON.parse(r.text).id, 'first-name');
    }
    assert.equal((await get(srv, `/v1/models/${MODEL_ID}`)).status, 404);
  });

  test('both aliases are accepted; answers carry the first', async () => {
    assert.deepEqual(await acceptedByAll(srv, 'first-name'), ['first-name', 'first-name', 'first-name']);
    assert.deepEqual(await acceptedByAll(srv, 'second-name'), ['first-name', 'first-name', 'first-name']);
  });

  test('the file name is not an alias: 404 naming the served name', async () => {
    await refusedByAll(srv, MODEL_ID, 'first-name');
  });
});

describe('--any-model', { timeout: 300_000 }, () => {
  let srv;
  before(async () => { srv = await startServer({ vision: false, extra: ['--any-model'] }); });
  after(() => stopServer(srv));

  test('any name is accepted; answers carry the served name', async () => {
    for (const name of ['gpt-4o', 'another-model', MODEL_ID]) {
      assert.deepEqual(await acceptedByAll(srv, name), [MODEL_ID, MODEL_ID, MODEL_ID]);
    }
    for (const [path, body] of Object.entries(RAW)) {
      const r = await post(srv, path, { ...body, model: 7 });
      assert.equal(r.status, 200, `${path}: ${r.text}`);
    }
  });
});
