// The shared tier on Redis (docs/cluster.md, Shared tier; issue 27): replicas
// that share one Redis find each other's pictures and conversations; a Redis
// that is down, restarted empty, read-only, full or slow costs hits, never an
// answer; a damaged value is refused, counted and never used; isolation
// domains never share a value. Every server and Redis here is the test's own,
// on loopback.
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';

import { metric, metrics, QWEN3VL, startServer, stopServer, turnVsCold, waitMetrics } from '../api/helpers.mjs';
import { oraclePic, text } from '../api/reuse-cases.mjs';
import { client, delayingProxy, HAVE_REDIS, startRedis } from './redis.mjs';

const M = QWEN3VL;
const skip = HAVE_REDIS ? false : 'redis-server is not installed (scripts/setup.sh installs it)';

const SHARED = {
  refused: 'pinhole_shared_tier_refused_total', errors: 'pinhole_shared_tier_errors_total',
  timeouts: 'pinhole_shared_tier_timeouts_total', written: 'pinhole_shared_tier_written_total',
  pic_hits: 'pinhole_image_cache_shared_hits_total', records: 'pinhole_disk_cache_shared_records_total',
  prefilled: 'pinhole_prompt_tokens_prefilled_total',
};
async function shared(srv) {
  const s = await metrics(srv);
  return Object.fromEntries(Object.entries(SHARED).map(([k, n]) => [k, metric(s, n)]));
}

// Everything the server queued for Redis (and its disk tier's writes before
// that) has been sent.
async function settled(srv) {
  const s = await waitMetrics(srv, (m) => metric(m, 'pinhole_disk_cache_writes_queued') === 0 &&
    metric(m, 'pinhole_shared_tier_queue_bytes') === 0);
  assert.equal(metric(s, 'pinhole_shared_tier_queue_bytes'), 0, 'the writes to the shared tier went out');
}

const photo = (name, q = 'What is in this picture?', salt = null) => ({
  messages: [
    { role: 'system', content: 'You are a careful assistant who describes pictures in detail.' },
    { role: 'user', content: [text('Here is my photo:'), oraclePic(name), text(q)] },
  ],
  ...(salt ? { cache_salt: salt } : {}),
});

describe('shared tier on Redis', { skip, timeout: 900_000 }, () => {
  let cold, redis;
  const dirs = [], servers = [];
  const tmp = () => { const d = mkdtempSync(join(tmpdir(), 'ph-shared-')); dirs.push(d); return d; };
  // A replica on redis (or url), with a disk tier of its own.
  const replica = async (url = redis.url, extra = []) => {
    const srv = await startServer({ model: M, extra: ['--kv-disk-dir', tmp(), '--shared-tier', url, ...extra] });
    servers.push(srv);
    return srv;
  };
  const stopAll = async () => { for (const s of servers.splice(0)) await stopServer(s).catch(() => s.stop('SIGKILL')); };
  before(async () => {
    redis = await startRedis();
    cold = await startServer({ model: M, extra: ['--no-cache'] });
  });
  after(async () => {
    await stopAll();
    await stopServer(cold);
    await redis?.stop();
    for (const d of dirs) rmSync(d, { recursive: true, force: true });
  });

  test('a picture encoded on one replica is not encoded on another', async () => {
    const a = await replica(), b = await replica();
    const ta = await turnVsCold(a, cold, photo('grad.png').messages, 'replica A');
    assert.equal(ta.d.encoded, 1);
    await settled(a);
    const before = await shared(b);
    const tb = await turnVsCold(b, cold, photo('grad.png', 'Which colours?').messages, 'replica B');
    const after = await shared(b);
    assert.equal(tb.d.encoded, 0, 'B took the embedding from the shared tier');
    assert.equal(after.pic_hits - before.pic_hits, 1, 'one picture from the shared tier');
    assert.equal(after.refused, 0);
    await stopAll();
  });

  test('a conversation continues on another replica after kill -9, from the shared tier', async () => {
    const a = await replica(), b = await replica();
    const msgs = photo('gray.png').messages;
    const t1 = await turnVsCold(a, cold, msgs, 'turn 1 on A');
    msgs.push({ role: 'assistant', content: 'It is a picture.' }, { role: 'user', content: 'Tell me more.' });
    const t2 = await turnVsCold(a, cold, msgs, 'turn 2 on A');
    assert.ok(t2.cached >= t1.prompt, 'turn 2 reused turn 1 on A');
    await settled(a);
    assert.equal((await a.stop('SIGKILL')).signal, 'SIGKILL');
    msgs.push({ role: 'assistant', content: 'It has colours.' }, { role: 'user', content: 'And the colours?' });
    const before = await shared(b);
    const t3 = await turnVsCold(b, cold, msgs, 'turn 3 on B');
    const after = await shared(b);
    assert.equal(t3.d.encoded, 0, 'nothing encoded on B');
    assert.ok(t3.cached >= t2.prompt, `B reused turn 2's prompt (${t3.cached} of ${t2.prompt}) from the shared tier`);
    assert.ok(after.records - before.records >= 1, 'block records fetched from the shared tier');
    assert.equal(after.prefilled - before.prefilled, t3.prompt - t3.cached, 'only the new rows were evaluated');
    assert.equal(after.refused, 0);
    await stopAll();
  });

  test('isolation domains never share a value across replicas', async () => {
    const a = await replica(), b = await replica();
    const ask = (srv, salt) => fetch(`${srv.url}/v1/chat/completions`, {
      method: 'POST', headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: M.id, max_tokens: 4, temperature: 0, ...photo('grad.png', 'Once more?', salt) }),
    }).then((r) => r.json());
    const enc = async (srv) => metric(await metrics(srv), 'pinhole_images_encoded_total');
    await ask(a, 'team-a');
    await settled(a);
    const e0 = await enc(b);
    const r = await ask(b, 'team-b');
    assert.equal(r.usage.prompt_tokens_details.cached_tokens, 0, 'nothing of team a reused by team b');
    assert.equal(await enc(b) - e0, 1, 'team b encoded the picture itself');
    const r2 = await ask(b, 'team-a');
    assert.equal(await enc(b) - e0, 1, 'team a on B: the picture from the shared tier');
    assert.ok(r2.usage.prompt_tokens_details.cached_tokens > 0, 'team a on B: its blocks from the shared tier');
    await stopAll();
  });

  test('damaged values in Redis are refused, counted and never used', async () => {
    const a = await replica();
    const t1 = await turnVsCold(a, cold, photo('grad.png', 'Describe it.').messages, 'writer');
    assert.ok(t1.prompt > 0);
    await settled(a);
    await stopAll();
    const r = await client(redis.port);
    const embeds = (await r.cmd('KEYS', 'pinhole:1:e:*')).map(String);
    const records = (await r.cmd('KEYS', 'pinhole:1:r:*')).map(String);
    assert.ok(embeds.length >= 1 && records.length >= 1, 'A wrote embeddings and block records');
    // flipped bytes in every value; and a value put under another key
    for (const k of [...embeds, ...records]) {
      const v = await r.cmd('GET', k);
      v[v.length - 10] ^= 0x55;
      await r.cmd('SET', k, v);
    }
    const b = await replica();
    let before = await shared(b);
    const tb = await turnVsCold(b, cold, photo('grad.png', 'Describe it.').messages, 'flipped bytes');
    let after = await shared(b);
    assert.equal(tb.d.encoded, 1, 'the damaged embedding was not used');
    assert.equal(tb.cached, 0, 'no damaged block was used');
    assert.ok(after.refused - before.refused >= 2, `refused: ${after.refused - before.refused}`);
    await settled(b);
    await stopAll();
    // an embedding of another picture under this one's key
    const grad = (await r.cmd('KEYS', 'pinhole:1:e:*')).map(String);
    const c0 = await replica();
    await turnVsCold(c0, cold, photo('small.png', 'Describe it.').messages, 'another picture');
    await settled(c0);
    await stopAll();
    const all = (await r.cmd('KEYS', 'pinhole:1:e:*')).map(String);
    const small = all.filter((k) => !grad.includes(k));
    assert.equal(small.length, 1, 'the other picture\'s embedding');
    for (const k of grad) await r.cmd('SET', k, await r.cmd('GET', small[0]));
    const c = await replica();
    before = await shared(c);
    const tc = await turnVsCold(c, cold, photo('grad.png', 'Describe it again.').messages, 'another key');
    after = await shared(c);
    assert.equal(tc.d.encoded, 1, 'a value under another key was not used');
    assert.ok(after.refused - before.refused >= 1);
    await stopAll();
    // another isolation domain's block records under this domain's names
    const chat = (srv, salt) => fetch(`${srv.url}/v1/chat/completions`, {
      method: 'POST', headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: M.id, max_tokens: 4, temperature: 0, ...photo('alpha.png', 'Whose is it?', salt) }),
    }).then((x) => x.json());
    const d1 = await replica();
    await chat(d1, 'team-a');
    await settled(d1);
    const ofA = (await r.cmd('KEYS', 'pinhole:1:r:*')).map(String);
    await chat(d1, 'team-b');
    await settled(d1);
    await stopAll();
    const ofB = (await r.cmd('KEYS', 'pinhole:1:r:*')).map(String).filter((k) => !ofA.includes(k));
    assert.ok(ofB.length >= 1, 'team b\'s records');
    const foreign = await r.cmd('GET', ofA[ofA.length - 1]);
    for (const k of ofB) await r.cmd('SET', k, foreign);
    const d2 = await replica();
    before = await shared(d2);
    const rb = await chat(d2, 'team-b');
    after = await shared(d2);
    assert.equal(rb.usage.prompt_tokens_details.cached_tokens, 0, 'no row of another domain\'s records');
    assert.ok(after.refused - before.refused >= 1, 'the foreign records were refused');
    r.close();
    await stopAll();
  });

  test('a Redis with a password: --shared-tier-password-file', async () => {
    const locked = await startRedis({ args: ['--requirepass', 'pass word'] });
    try {
      const file = join(tmp(), 'redis-password');
      writeFileSync(file, 'pass word\n', { mode: 0o600 });
      const a = await replica(locked.url, ['--shared-tier-password-file', file]);
      await turnVsCold(a, cold, photo('grad.png', 'Behind a password?').messages, 'with the password');
      await settled(a);
      const s = await shared(a);
      assert.ok(s.written >= 1, 'values written');
      assert.equal(s.errors, 0, 'no error');
      const wrong = join(tmp(), 'wrong');
      writeFileSync(wrong, 'not it\n', { mode: 0o600 });
      const b = await replica(locked.url, ['--shared-tier-password-file', wrong]);
      await turnVsCold(b, cold, photo('grad.png', 'Behind a password?').messages, 'a wrong password');
      assert.ok((await shared(b)).errors >= 1, 'the refused AUTH is counted');
      await stopAll();
    } finally {
      await locked.stop();
    }
  });

  test('a Redis that is down, restarted empty, read-only, full or slow costs hits, never answers', async () => {
    const port = redis.port;
    const a = await replica();
    // down
    await redis.stop();
    let before = await shared(a);
    await turnVsCold(a, cold, photo('grad.png', 'Is Redis there?').messages, 'Redis down');
    await settled(a);
    let after = await shared(a);
    assert.ok(after.errors > before.errors, 'errors counted');
    // restarted empty, on the same port
    redis = await startRedis({ port });
    await new Promise((r) => setTimeout(r, 1200)); // the tier rests a second after an error
    await turnVsCold(a, cold, photo('gray.png', 'And now?').messages, 'Redis restarted empty');
    await settled(a);
    after = await shared(a);
    assert.ok(after.written > before.written, 'writes go on after the restart');
    // read-only: a replica of a master that is not there refuses writes
    const r = await client(port);
    await r.cmd('REPLICAOF', '127.0.0.1', '1');
    before = await shared(a);
    await turnVsCold(a, cold, photo('grad.png', 'Read-only now?').messages, 'Redis read-only');
    await settled(a);
    after = await shared(a);
    assert.ok(after.errors > before.errors, 'writes refused by a read-only Redis are counted');
    await r.cmd('REPLICAOF', 'NO', 'ONE');
    // full: no room and no eviction
    await r.cmd('CONFIG', 'SET', 'maxmemory-policy', 'noeviction');
    await r.cmd('CONFIG', 'SET', 'maxmemory', '1');
    before = await shared(a);
    await turnVsCold(a, cold, photo('gray.png', 'Full now?').messages, 'Redis full');
    await settled(a);
    after = await shared(a);
    assert.ok(after.errors > before.errors, 'writes refused by a full Redis are counted');
    await r.cmd('CONFIG', 'SET', 'maxmemory', '512mb');
    r.close();
    await stopAll();
    // slow: every reply past the deadline
    const proxy = await delayingProxy(port, 400);
    try {
      const s = await replica(`redis://127.0.0.1:${proxy.port}`, ['--shared-tier-timeout-ms', '100']);
      before = await shared(s);
      await turnVsCold(s, cold, photo('grad.png', 'Slow Redis?').messages, 'Redis slow');
      after = await shared(s);
      assert.ok(after.timeouts > before.timeouts, 'timeouts counted');
      await stopAll();
    } finally {
      await proxy.close();
    }
  });
});
