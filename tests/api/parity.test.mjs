// The same conversation gives the same greedy text through every endpoint
// (chat completions, responses, messages; each plain and streamed) and
// through `pinhole run` on the raw ChatML prompt; usage and finish reasons
// agree with what was generated.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';

import {
  askEverywhere, assistant, img, openai, chatResult, MODEL_ID, reference, startServer, stopServer, toChat, user,
} from './helpers.mjs';

const N = 12;

const CONVERSATIONS = {
  'system + text': { system: 'You are a terse assistant.', turns: [user('Name three colours.')] },
  'text only, no system': { turns: [user('Hello there')] },
  'picture then text': { turns: [user(img('small.png'), 'What is in the picture?')] },
  'system + photo then text': { system: 'Describe pictures.', turns: [user(img('photo.jpg'), 'Describe it.')] },
  'text, picture, text': { turns: [user('Look: ', img('small.png'), ' and say what you see.')] },
  'two pictures (alpha, 16-bit)': { turns: [user(img('alpha.png'), img('grad16.png'), 'Compare them.')] },
  'two turns': {
    system: 'Be brief.',
    turns: [user('Hi'), assistant('Hello! How can I help?'), user('Count to five.')],
  },
};

describe('same greedy text everywhere', { timeout: 300_000 }, () => {
  let srv;
  before(async () => { srv = await startServer(); });
  after(() => stopServer(srv));

  for (const [name, conv] of Object.entries(CONVERSATIONS)) {
    test(name, async () => {
      const ref = await reference(conv, N);
      const got = await askEverywhere(srv, conv, N);
      const prompts = new Set();
      for (const [how, r] of Object.entries(got)) {
        assert.equal(r.text, ref.text, `${how}: text differs from pinhole run`);
        assert.equal(r.completion, ref.nTokens, `${how}: completion tokens (pinhole run generated ${ref.nTokens})`);
        assert.equal(r.finish, ref.stopped ? 'stop' : 'length', `${how}: finish`);
        assert.ok(r.prompt > 0, `${how}: prompt tokens`);
        assert.ok(r.cached >= 0 && r.cached <= r.prompt, `${how}: cached tokens ${r.cached} of ${r.prompt}`);
        prompts.add(r.prompt);
      }
      assert.equal(prompts.size, 1, `prompt tokens agree across endpoints: ${[...prompts]}`);
      if (ref.stopped) {
        assert.equal(got.messages.stopReason, 'end_turn');
        assert.equal(got.responses.status, 'completed');
      } else {
        assert.equal(got.messages.stopReason, 'max_tokens');
      }
    });
  }

  test('a picture adds its rows to the prompt tokens', async () => {
    const oa = openai(srv);
    const ask = (conv) => oa.chat.completions.create({ model: MODEL_ID, messages: toChat(conv), max_tokens: 1, temperature: 0 });
    const text = chatResult(await ask({ turns: [user('What is in the picture?')] }));
    const pic = chatResult(await ask({ turns: [user(img('small.png'), 'What is in the picture?')] }));
    // <|vision_start|> + at least 8 rows (the default least budget) + <|vision_end|>
    assert.ok(pic.prompt >= text.prompt + 10, `with picture ${pic.prompt}, without ${text.prompt}`);
  });

  test('a developer message is a system message', async () => {
    const conv = { system: 'You are a terse assistant.', turns: [user('Name three colours.')] };
    const oa = openai(srv);
    const a = chatResult(await oa.chat.completions.create({ model: MODEL_ID, messages: toChat(conv), max_tokens: N, temperature: 0 }));
    const b = chatResult(await oa.chat.completions.create({
      model: MODEL_ID, messages: toChat(conv, { systemRole: 'developer' }), max_tokens: N, temperature: 0,
    }));
    assert.equal(b.text, a.text);
    assert.equal(b.prompt, a.prompt);
  });

  test('text parts are joined with nothing between them', async () => {
    const ref = await reference({ turns: [user('Name three colours.')] }, N);
    const r = chatResult(await openai(srv).chat.completions.create({
      model: MODEL_ID, max_tokens: N, temperature: 0,
      messages: [{ role: 'user', content: [{ type: 'text', text: 'Name three ' }, { type: 'text', text: 'colours.' }] }],
    }));
    assert.equal(r.text, ref.text);
  });

  test('max_completion_tokens limits like max_tokens', async () => {
    const conv = { turns: [user('Hello there')] };
    const ref = await reference(conv, 3);
    const r = chatResult(await openai(srv).chat.completions.create({
      model: MODEL_ID, messages: toChat(conv), max_completion_tokens: 3, temperature: 0,
    }));
    assert.equal(r.text, ref.text);
    assert.equal(r.completion, ref.nTokens);
    assert.equal(r.finish, ref.stopped ? 'stop' : 'length');
  });
});
