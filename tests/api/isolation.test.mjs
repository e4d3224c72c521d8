// The cross-client side channel of the prefix cache (issue 13, item 6):
// usage's cached tokens (and timing) tell a client how much of its prompt
// the server had already seen, so a client that shares a prompt prefix
// with another can read the other's prompt token by token. A request's
// `cache_salt`, and with several keys in --api-key-file its key, put it in
// an isolation domain: state (live KV, RAM checkpoints, the parked
// conversation, checkpoint files) and picture embeddings are reused only
// within a domain. Each case shows the leak inside a domain and its absence
// across domains, in usage and in /metrics.
import assert from 'node:assert/strict';
import { mkdtempSync, openSync, readdirSync, readSync, closeSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, test } from 'node:test';

import {
  anthropic, counters, diff, MODEL_ID, openai, picture, post, withServer,
} from './helpers.mjs';

const SECRET = '7391';
const VICTIM = `The code of the vault is ${SECRET}. Never tell it to anyone.`;
const probeText = (guess) => `The code of the vault is ${guess}`;
const pic = (name) => ({ type: 'image_url', image_url: { url: picture(name).url } });
const text = (t) => ({ type: 'text', text: t });

// One Chat Completions turn (one token): {cached, prompt}. salt undefined:
// no cache_salt; key: the API key.
async function chat(srv, messages, { salt, key } = {}) {
  const body = { model: MODEL_ID, messages, max_tokens: 1, temperature: 0 };
  if (salt !== undefined) body.cache_salt = salt;
  const r = await openai(srv, key ? { apiKey: key } : {}).chat.completions.create(body);
  return { cached: r.usage.prompt_tokens_details.cached_tokens, prompt: r.usage.prompt_tokens };
}
const say = (content) => [{ role: 'user', content }];

// The turn and what it moved in /metrics (key: the key /metrics needs).
async function measured(srv, fn, key) {
  const headers = key ? { 'x-api-key': key } : {};
  const before = await counters(srv, headers);
  const r = await fn();
  return { ...r, d: diff(before, await counters(srv, headers)) };
}

// Nothing of another domain reused: usage and every reuse counter.
function nothingReused(r, what) {
  assert.equal(r.cached, 0, `${what}: no cached tokens`);
  for (const k of ['reused', 'ram', 'ram_hits', 'disk', 'disk_hits']) assert.equal(r.d[k], 0, `${what}: ${k} moved`);
}

// The attack: guess the secret digit by digit, each guess the digit whose
// probe the server reports the most cached tokens for.
async function recover(srv, salt) {
  let known = '';
  for (let pos = 0; pos < SECRET.length; pos++) {
    let best = null;
    for (let d = 0; d <= 9; d++) {
      const { cached } = await chat(srv, say(probeText(known + d)), { salt });
      if (!best || cached > best.cached) best = { d, cached };
    }
    known += best.d;
  }
  return known;
}

describe('isolation of the state caches', { timeout: 600_000 }, () => {
  const dirs = [];
  const tmp = (what) => { const d = mkdtempSync(join(tmpdir(), `ph-iso-${what}-`)); dirs.push(d); return d; };
  after(() => { for (const d of dirs) rmSync(d, { recursive: true, force: true }); });

  test('a secret in a prompt: readable through cached_tokens within its salt, not from another salt or none', async () => {
    await withServer({ vision: false }, async (srv) => {
      // the victim, through the Messages API
      const v = await anthropic(srv).messages.create({
        model: MODEL_ID, messages: say(VICTIM), max_tokens: 1, temperature: 0, cache_salt: 'alice',
      });
      assert.equal(v.usage.cache_read_input_tokens, 0);
      // another salt: the right first digit is reported like every other
      const first = await measured(srv, () => chat(srv, say(probeText(SECRET[0])), { salt: 'mallory' }));
      nothingReused(first, 'the first probe of another salt');
      // a scan of the first digit from a fresh salt: after its first probe
      // (nothing cached) each probe shares with the salt's own earlier ones
      // only, the same for every digit
      const seen = [];
      for (let d = 0; d <= 9; d++) seen.push((await chat(srv, say(probeText(String(d))), { salt: 'mallory-2' })).cached);
      assert.ok(seen[0] === 0 && seen.slice(1).every((c) => c === seen[1]),
                `another salt: no digit stands out (${seen.join(' ')})`);
      assert.notEqual(await recover(srv, 'mallory-3'), SECRET, 'another salt cannot read the secret');
      // no salt at all: the default domain, another one again
      nothingReused(await measured(srv, () => chat(srv, say(probeText(SECRET)))), 'a probe without salt');
      // the victim's own salt shares everything, the secret included: the
      // leak the salt is for (one salt per user who must not read the other)
      assert.equal(await recover(srv, 'alice'), SECRET, 'within one salt the prefix cache tells the secret');
      const r = await openai(srv).responses.create({
        model: MODEL_ID, input: probeText(SECRET), max_output_tokens: 1, temperature: 0, cache_salt: 'alice',
      });
      assert.ok(r.usage.input_tokens_details.cached_tokens > 0, 'Responses: cached tokens within the salt');
    });
  });

  test('a picture: its embedding is encoded again for another salt, reused within its own', async () => {
    await withServer({}, async (srv) => {
      const ask = [{ role: 'user', content: [pic('gray.png'), text('What is in this picture?')] }];
      const a = await measured(srv, () => chat(srv, ask, { salt: 'alice' }));
      assert.equal(a.d.encoded, 1);
      for (const salt of ['mallory', undefined]) {
        const m = await measured(srv, () => chat(srv, ask, { salt }));
        nothingReused(m, `salt ${salt}`);
        assert.equal(m.d.encoded, 1, `salt ${salt}: the picture is encoded again`);
        assert.equal(m.d.hits, 0, `salt ${salt}: no embedding-cache hit`);
      }
      const again = await measured(srv, () => chat(srv, ask, { salt: 'alice' }));
      assert.ok(again.cached > 0 && again.d.reused === again.cached, `alice again: ${again.cached} cached`);
      assert.equal(again.d.encoded, 0);
      // another question about the same picture: mallory's own embedding
      const other = [{ role: 'user', content: [text('Look at this:'), pic('gray.png')] }];
      const m2 = await measured(srv, () => chat(srv, other, { salt: 'mallory' }));
      assert.equal(m2.d.encoded, 0, 'the salt reuses its own embedding');
      assert.equal(m2.d.hits, 1);
    });
  });

  test('several keys in --api-key-file: each key is its own domain, whatever salt it sends', async () => {
    const dir = tmp('keys');
    const K1 = 'sk-isolation-one-0001', K2 = 'sk-isolation-two-0002';
    const file = join(dir, 'keys');
    writeFileSync(file, `# two users\n${K1}\n\n${K2}\n`, { mode: 0o600 });
    const conv = say('Remember the number 4242 and the colour teal for later.');
    await withServer({ vision: false, extra: ['--api-key-file', file] }, async (srv) => {
      const s = (key, salt) => measured(srv, () => chat(srv, conv, { key, salt }), key);
      assert.equal((await s(K1)).cached, 0);
      nothingReused(await s(K2), 'the other key');
      assert.ok((await s(K1)).cached > 0, 'the same key reuses');
      assert.ok((await s(K2)).cached > 0, 'and so does the other, its own');
      nothingReused(await s(K1, 'shared'), 'key 1 with a salt');
      nothingReused(await s(K2, 'shared'), 'key 2 with the same salt');
      assert.ok((await s(K1, 'shared')).cached > 0, 'key 1 with its salt again');
    });
    // one key: nothing changes, the requests share as without a key
    await withServer({ vision: false, extra: ['--api-key', K1] }, async (srv) => {
      assert.equal((await chat(srv, conv, { key: K1 })).cached, 0);
      assert.ok((await chat(srv, conv, { key: K1 })).cached > 0, 'one key: shared');
      assert.equal((await chat(srv, conv, { key: K1, salt: 'x' })).cached, 0, 'one key and a salt: isolated');
    });
  });

  test('the disk tier and --image-cache-dir across a restart: found again by the same salt only', async () => {
    const kv = tmp('kv'), img = tmp('img');
    const extra = ['--kv-disk-dir', kv, '--image-cache-dir', img];
    const msgs = [
      { role: 'system', content: 'You are a careful assistant who describes pictures in detail.' },
      { role: 'user', content: [text('Here is my photo:'), pic('grad.png'), text('What is in this picture?')] },
    ];
    let t2;
    await withServer({ extra }, async (srv) => {
      assert.equal((await measured(srv, () => chat(srv, msgs, { salt: 'alice' }))).d.encoded, 1);
      msgs.push({ role: 'assistant', content: 'It is a picture.' }, { role: 'user', content: 'Tell me more.' });
      t2 = await chat(srv, msgs, { salt: 'alice' });
    });
    // alice's records carry her domain (a digest, not the salt) in their headers (docs/state-cache.md, Block records)
    const blocks = join(kv, 'blocks');
    const files = readdirSync(blocks).filter((f) => f.startsWith('seg-') && f.endsWith('.phbs'));
    assert.ok(files.length >= 1, 'a segment file was written');
    for (const f of files) {
      const fd = openSync(join(blocks, f), 'r'), b = Buffer.alloc(320);
      readSync(fd, b, 0, 320, 0);
      closeSync(fd);
      assert.equal(b.subarray(0, 8).toString('latin1'), 'PHBLKS01', `${f}: a record`);
      assert.ok(b.subarray(144, 176).some((x) => x !== 0), `${f}: her domain, not the default one`);
    }
    msgs.push({ role: 'assistant', content: 'It has colours.' }, { role: 'user', content: 'And the colours?' });
    await withServer({ extra }, async (srv) => {
      // her picture again, after other text: from her embedding file, nobody else's
      const other = [{ role: 'user', content: [text('Another question first:'), pic('grad.png')] }];
      const e = await measured(srv, () => chat(srv, other, { salt: 'alice' }));
      assert.equal(e.d.encoded, 0, 'alice: her embedding from --image-cache-dir');
      for (const salt of ['mallory', undefined]) {
        const m = await measured(srv, () => chat(srv, msgs, { salt }));
        nothingReused(m, `salt ${salt} after the restart`);
        assert.equal(m.d.encoded, 1, `salt ${salt}: the picture is encoded`);
      }
      const r = await measured(srv, () => chat(srv, msgs, { salt: 'alice' }));
      assert.ok(r.cached >= t2.prompt, `alice resumes from her file (${r.cached} of ${t2.prompt})`);
      assert.ok(r.d.disk >= t2.prompt && r.d.disk_hits >= 1, `from disk: ${r.d.disk} rows`);
      assert.equal(r.d.encoded, 0);
    });
  });

  test('cache_salt must be a non-empty string of at most 256 bytes, on every API', async () => {
    await withServer({ vision: false }, async (srv) => {
      const bodies = {
        '/v1/chat/completions': (salt) => ({ model: MODEL_ID, messages: say('Hi.'), max_tokens: 1, cache_salt: salt }),
        '/v1/responses': (salt) => ({ model: MODEL_ID, input: 'Hi.', max_output_tokens: 1, cache_salt: salt }),
        '/v1/messages': (salt) => ({ model: MODEL_ID, messages: say('Hi.'), max_tokens: 1, cache_salt: salt }),
        '/v1/messages/count_tokens': (salt) => ({ model: MODEL_ID, messages: say('Hi.'), cache_salt: salt }),
      };
      const bad = ['', 5, true, [], ['a'], {}, { salt: 'a' }, 'x'.repeat(257), 'é'.repeat(129)];
      const good = [null, 'a', 'x'.repeat(256), 'é'.repeat(128), 'tenant 42 / user 7'];
      for (const [path, body] of Object.entries(bodies)) {
        for (const salt of bad) {
          const r = await post(srv, path, body(salt));
          assert.equal(r.status, 400, `${path} ${JSON.stringify(salt).slice(0, 40)}: ${r.text}`);
          if (path.startsWith('/v1/messages')) assert.equal(r.json?.error?.type, 'invalid_request_error');
          assert.match(r.json?.error?.message ?? '', /'cache_salt' must be a non-empty string of at most 256 bytes/, path);
        }
        for (const salt of good) {
          const r = await post(srv, path, body(salt));
          assert.equal(r.status, 200, `${path} ${JSON.stringify(salt).slice(0, 40)}: ${r.text}`);
        }
      }
    });
  });
});
