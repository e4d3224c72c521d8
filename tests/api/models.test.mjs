// Starting on real model files as a user has them (issue 15, items 1 and
// 6): `-m DIR` or `-m MODEL.gguf` alone finds the vision file beside the
// model that pairs with it, and the server says in one line which files it
// runs and whether pictures are on, and how it chose the context; a
// picture takes at most half the context, and a request whose pictures do
// not fit is refused naming the picture and its tokens.
import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, rmSync, symlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';

import { MMPROJ, MODEL, MODEL_ID, ORACLE, get, openai, openaiError, picture, post, withServer } from './helpers.mjs';

// a log line's timestamp (pinhole serve's lines start with one)
const TS = '\\d{4}-\\d\\d-\\d\\dT\\d\\d:\\d\\d:\\d\\d\\.\\d{3}Z ';
const image = (p) => ({ type: 'image_url', image_url: { url: p.url } });
const ask = (...pics) => [{ role: 'user', content: [...pics.map(image), { type: 'text', text: 'What is it?' }] }];

describe('model files', { timeout: 300_000 }, () => {
  let dir;
  before(() => {
    dir = mkdtempSync(join(tmpdir(), 'pinhole-models-'));
    mkdirSync(join(dir, 'pair'));
    // the pair, and a vision file of another model (another width) beside it
    symlinkSync(MODEL, join(dir, 'pair', 'tiny-f16.gguf'));
    symlinkSync(MMPROJ, join(dir, 'pair', 'tiny-f16-mmproj.gguf'));
    symlinkSync(join(ORACLE, 'models', 'mid-q8-mmproj.gguf'), join(dir, 'pair', 'mmproj-mid-q8.gguf'));
  });
  after(() => rmSync(dir, { recursive: true, force: true }));

  test('-m DIR: the pair in it, said in one line; pictures work', async () => {
    const pair = join(dir, 'pair');
    await withServer({ model: pair, vision: null }, async (srv) => {
      assert.match(srv.stderr, new RegExp(`^${TS}pinhole: model ${pair}/tiny-f16\\.gguf, vision ${pair}/tiny-f16-mmproj\\.gguf ` +
                                          '\\(found in the folder; pictures on\\)$', 'm'));
      assert.match(srv.stderr, /mmproj-mid-q8\.gguf produces rows of 384 floats but the LLM takes 128: they are not a pair \(not used\)/);
      assert.match(srv.stderr, new RegExp(`^${TS}pinhole: tiny-f16 \\(qwen3vl\\), context 4096 \\(trained; [\\d.]+ GiB memory ` +
                                          'available\\), pictures up to 2048 tokens, 2 threads \\(-t\\)', 'm'));
      const models = await get(srv, '/v1/models');
      assert.equal(JSON.parse(models.text).data[0].id, MODEL_ID, 'the name of the file the folder held');
      const r = await openai(srv).chat.completions.create({ model: MODEL_ID, messages: ask(picture('grad.png')), max_tokens: 2 });
      assert.ok(r.usage.prompt_tokens > 10, `${r.usage.prompt_tokens} prompt tokens: the picture's rows among them`);
    });
  });

  test('--no-mmproj: text only, said so; a picture is refused', async () => {
    await withServer({ model: join(dir, 'pair', 'tiny-f16.gguf'), vision: false }, async (srv) => {
      assert.match(srv.stderr, new RegExp(`^${TS}pinhole: model .*/tiny-f16\\.gguf, no vision file \\(text only: --no-mmproj\\)$`, 'm'));
      assert.doesNotMatch(srv.stderr, /pictures up to/);
      await openaiError(openai(srv).chat.completions.create({ model: MODEL_ID, messages: ask(picture('grad.png')), max_tokens: 2 }), 400);
    });
  });

  test('-c 256: a picture takes at most 128 rows; the one that does not fit is named with its tokens', async () => {
    await withServer({ model: join(dir, 'pair'), vision: null, extra: ['-c', '256'] }, async (srv) => {
      assert.match(srv.stderr, /context 256 \(as asked\), pictures up to 128 tokens/);
      const large = picture('large.png'); // 1400 x 1000: over a thousand rows uncapped
      const count = await post(srv, '/v1/messages/count_tokens', { model: MODEL_ID, messages: [{ role: 'user', content: [
        { type: 'image', source: { type: 'base64', media_type: large.mime, data: large.b64 } }, { type: 'text', text: 'hi' }] }] });
      assert.equal(count.status, 200, count.text);
      const n = count.json.input_tokens;
      assert.ok(n > 64 && n < 128 + 32, `one large picture and a word: ${n} tokens`);
      await openaiError(openai(srv).chat.completions.create({ model: MODEL_ID, messages: ask(large, large, large), max_tokens: 2 }), 400,
                        /^picture 3 \(\d+ tokens\) does not fit: the prompt through it is at least \d+ tokens long \(its pictures alone\) but the context holds 256/);
    });
  });
});
