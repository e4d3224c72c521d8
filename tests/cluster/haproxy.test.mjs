// Replicas behind HAProxy (docs/cluster.md): deploy/local-cluster.sh starts
// Redis, 3 replicas of the tiny model and HAProxy with deploy/haproxy.cfg;
// requests with one session key (the header X-Pinhole-Session, or the
// body's prompt_cache_key / metadata.user_id / safety_identifier) land on one
// replica, different keys spread, a busy replica's keys spill (bounded
// load), a drained replica finishes what it runs and takes no new request,
// a replica killed with SIGKILL loses only its own keys, each to one other
// replica, a picture sent through one replica is not encoded by another
// (the shared tier), and the script's status, restart and down work.
//
// Which replica answered: HAProxy's X-Pinhole-Replica header, checked
// against the replicas' own /metrics counters. PH_CLUSTER_KEEP=1 keeps the
// state folder (the parts' logs and configs) after the test.
import assert from 'node:assert/strict';
import { rmSync } from 'node:fs';
import { test } from 'node:test';
import {
  admin, alive, answered, heldRequest, listening, makeCluster, missingPrograms, oneConnectionFetch,
  running, serverStates, until,
} from './helpers.mjs';

const missing = missingPrograms();
// The API tests' helpers (the clients, the binaries, the models) only where
// the test runs: they need PINHOLE_BIN and the oracle's models.
const api = missing ? null : await import('../api/helpers.mjs');

const N = 3;
const KEYS = Array.from({ length: 20 }, (_, i) => `session-${i}`);
const ASK = [{ role: 'user', content: 'Say hi.' }];

test('replicas behind HAProxy: session affinity, bounded load, drain, failover, the cluster script', {
  skip: missing ? `${missing}: the cluster tests need both` : false, timeout: 110_000,
}, async (t) => {
  const { OpenAI, Anthropic, BIN, MODEL, MMPROJ, MODEL_ID } = api;
  const cluster = makeCluster({ replicas: N, bin: BIN, model: MODEL, mmproj: MMPROJ, parallel: 2, threads: 1 });
  const oneConn = oneConnectionFetch();
  t.after(async () => {
    oneConn.close();
    const r = await cluster.down();
    if (r.code !== 0) console.error(`local-cluster.sh down: ${r.code}\n${r.stderr}`);
    for (const pid of Object.values(cluster.pids())) if (alive(pid)) process.kill(pid, 'SIGKILL');
    if (process.env.PH_CLUSTER_KEEP) console.error(`kept ${cluster.state} (PH_CLUSTER_KEEP)`);
    else rmSync(cluster.state, { recursive: true, force: true });
  });
  await cluster.up();

  const opts = { maxRetries: 0, timeout: 30_000, fetch: oneConn };
  const openai = new OpenAI({ baseURL: `${cluster.lbUrl}/v1`, apiKey: 'none', ...opts });
  const anthropic = new Anthropic({ baseURL: cluster.lbUrl, apiKey: 'none', ...opts });

  // One short chat completion; the replica that answered it.
  async function chat({ session, body = {} } = {}) {
    const headers = session === undefined ? {} : { 'X-Pinhole-Session': session };
    const { data, response } = await openai.chat.completions
      .create({ model: MODEL_ID, messages: ASK, max_tokens: 2, ...body }, { headers }).withResponse();
    assert.equal(data.object, 'chat.completion');
    const replica = response.headers.get('x-pinhole-replica');
    assert.match(replica ?? '', /^r[1-3]$/, 'HAProxy names the replica that answered');
    return replica;
  }
  async function counts(names) {
    const out = {};
    for (const n of names) out[n] = await answered(cluster.replicaPort(n));
    return out;
  }
  // Runs fn(saw), and checks that the replicas' own counters grew exactly as
  // the X-Pinhole-Replica headers passed to saw say: no request answered
  // twice, none by another replica than the one named.
  async function checked(fn, names = cluster.names()) {
    const seen = [];
    const before = await counts(names);
    await fn((replica) => { seen.push(replica); return replica; });
    const after = await counts(names);
    for (const n of names) {
      assert.equal(after[n] - before[n], seen.filter((r) => r === n).length,
        `replica ${n}'s /metrics count matches the answers that named it`);
    }
  }
  // A request that a replica runs until finish(): its body held back.
  const PAD = ' '.repeat(24_000);
  const holdOn = (session) => heldRequest(cluster.lbPort, {
    headers: { 'X-Pinhole-Session': session },
    body: `{"model":"${MODEL_ID}",${PAD}"messages":${JSON.stringify(ASK)},"max_tokens":2}`,
    first: 20_000,
  });

  const home = new Map(); // session key -> its replica, from the header
  await t.test('(a) one X-Pinhole-Session key: one replica; 20 keys: several; no key: any', async () => {
    await checked(async (saw) => {
      for (const key of KEYS) home.set(key, saw(await chat({ session: key })));
      for (let round = 0; round < 2; round++) {
        for (const key of KEYS) assert.equal(saw(await chat({ session: key })), home.get(key), `key ${key} stays on its replica`);
      }
    });
    const used = new Set(home.values());
    assert.ok(used.size > 1, `20 keys spread over more than one replica (all on ${[...used]})`);
    // No key (an empty header is none): round robin.
    const none = new Set();
    await checked(async (saw) => {
      for (let i = 0; i < N; i++) none.add(saw(await chat()));
      for (let i = 0; i < N; i++) none.add(saw(await chat({ session: '' })));
    });
    assert.ok(none.size > 1, `requests without a key spread (all on ${[...none]})`);
  });

  await t.test('(shared tier) a picture sent through one replica is not encoded by another', async () => {
    const k1 = KEYS[0], k2 = KEYS.find((k) => home.get(k) !== home.get(k1));
    assert.ok(k2, 'two keys on two replicas');
    const at = (name) => ({ url: `http://127.0.0.1:${cluster.replicaPort(name)}` });
    const picture = api.picture('grad.png');
    const ask = (session) => chat({ session, body: { messages: [{ role: 'user', content: [
      { type: 'text', text: `Seen by ${session}?` }, { type: 'image_url', image_url: { url: picture.url } }] }] } });
    const enc = async (name) => api.metric(await api.metrics(at(name)), 'pinhole_images_encoded_total');
    const fromTier = async (name) => api.metric(await api.metrics(at(name)), 'pinhole_image_cache_shared_hits_total');
    const [a, b] = [home.get(k1), home.get(k2)];
    const [encA, encB, hitsB] = [await enc(a), await enc(b), await fromTier(b)];
    assert.equal(await ask(k1), a);
    assert.equal(await enc(a) - encA, 1, `${a} encoded the picture`);
    await api.waitMetrics(at(a), (m) => api.metric(m, 'pinhole_shared_tier_queue_bytes') === 0 &&
      api.metric(m, 'pinhole_shared_tier_written_total') >= 1);
    assert.equal(await ask(k2), b);
    assert.equal(await enc(b) - encB, 0, `${b} did not encode it`);
    assert.equal(await fromTier(b) - hitsB, 1, `${b} took it from the shared tier`);
  });

  await t.test('(b) the body\'s prompt_cache_key, metadata.user_id, safety_identifier: the header\'s replica', async () => {
    await checked(async (saw) => {
      // prompt_cache_key (Chat Completions), no header
      for (const key of KEYS) {
        assert.equal(saw(await chat({ body: { prompt_cache_key: key } })), home.get(key), `prompt_cache_key ${key}`);
      }
      // metadata.user_id (Anthropic Messages, the official client)
      for (const key of KEYS.slice(0, 6)) {
        const { data, response } = await anthropic.messages
          .create({ model: MODEL_ID, max_tokens: 2, messages: ASK, metadata: { user_id: key } }).withResponse();
        assert.equal(data.type, 'message');
        assert.equal(saw(response.headers.get('x-pinhole-replica')), home.get(key), `metadata.user_id ${key}`);
      }
      // safety_identifier (Responses)
      for (const key of KEYS.slice(0, 6)) {
        const { data, response } = await openai.responses
          .create({ model: MODEL_ID, input: 'Say hi.', max_output_tokens: 2, safety_identifier: key }).withResponse();
        assert.equal(data.object, 'response');
        assert.equal(saw(response.headers.get('x-pinhole-replica')), home.get(key), `safety_identifier ${key}`);
      }
      // the header wins over the body
      const other = KEYS.find((k) => home.get(k) !== home.get(KEYS[0]));
      assert.equal(saw(await chat({ session: KEYS[0], body: { prompt_cache_key: other } })), home.get(KEYS[0]),
        'the header, not prompt_cache_key, places the request');
      // A body longer than HAProxy's buffer: the header still places it, and
      // so does a prompt_cache_key at the body's start.
      for (const key of KEYS.slice(0, 3)) {
        for (const [how, headers, body] of [
          ['the header', { 'X-Pinhole-Session': key }, `{"model":"${MODEL_ID}",${PAD}"messages":${JSON.stringify(ASK)},"max_tokens":2}`],
          ['prompt_cache_key first', {}, `{"prompt_cache_key":"${key}","model":"${MODEL_ID}",${PAD}"messages":${JSON.stringify(ASK)},"max_tokens":2}`],
        ]) {
          const res = await oneConn(`${cluster.lbUrl}/v1/chat/completions`, {
            method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body,
          });
          assert.equal(res.status, 200, await res.text());
          assert.equal(saw(res.headers.get('x-pinhole-replica')), home.get(key), `a 24 kB body with ${how}: ${key}`);
        }
      }
    });
  });

  // the replica with the most keys, and its keys
  const busiest = () => {
    const by = new Map();
    for (const k of KEYS) by.set(home.get(k), [...(by.get(home.get(k)) ?? []), k]);
    return [...by.entries()].sort((x, y) => y[1].length - x[1].length)[0];
  };

  await t.test('(bounded load, drain) a busy replica\'s next key spills; a drained one finishes its request and takes no new one', async () => {
    const [victim, itsKeys] = busiest();
    assert.ok(itsKeys.length >= 2, `${victim} has 2 keys or more`);
    const others = KEYS.filter((k) => home.get(k) !== victim);
    // a request that the victim runs until we let it finish
    const held = await holdOn(itsKeys[0]);
    await until(`${victim} runs the held request`, async () => (await running(cluster.socket, victim)) === 1);
    await checked(async (saw) => {
      // Bounded load (hash-balance-factor 150): of 3 replicas one runs a
      // request and two are idle, so a second request for the busy one goes
      // to another; the others' keys stay where they are.
      assert.notEqual(saw(await chat({ session: itsKeys[1] })), victim, `key ${itsKeys[1]} spills off the busy ${victim}`);
      for (const key of others.slice(0, 4)) assert.equal(saw(await chat({ session: key })), home.get(key), `key ${key} stays`);
    });
    assert.equal(await running(cluster.socket, victim), 1, 'the held request still runs');
    // Drain the victim: no new request goes there, the held one finishes.
    assert.equal((await admin(cluster.socket, `set server pinhole/${victim} state drain`)).trim(), '');
    assert.equal((await serverStates(cluster.socket))[victim], 'DRAIN');
    await checked(async (saw) => {
      for (const key of itsKeys) assert.notEqual(saw(await chat({ session: key })), victim, `key ${key} leaves the drained ${victim}`);
      for (const key of others) assert.equal(saw(await chat({ session: key })), home.get(key), `key ${key} stays on ${home.get(key)}`);
    });
    await checked(async (saw) => {
      const res = await held.finish();
      assert.equal(res.status, 200, res.body);
      assert.match(res.body, /"object":"chat\.completion"/);
      assert.equal(saw(res.headers['x-pinhole-replica']), victim, 'the drained replica answered the request it ran');
    }, [victim]);
    // Ready again: the keys come back.
    assert.equal((await admin(cluster.socket, `set server pinhole/${victim} state ready`)).trim(), '');
    await until(`${victim} up again`, async () => (await serverStates(cluster.socket))[victim] === 'UP');
    await checked(async (saw) => {
      for (const key of itsKeys) assert.equal(saw(await chat({ session: key })), victim, `key ${key} back on ${victim}`);
    });
  });

  await t.test('(c) a replica killed with SIGKILL: its keys move, each to one other replica, and are answered; the others stay', async () => {
    const [victim, itsKeys] = busiest();
    const pid = cluster.pids()[victim];
    assert.ok(alive(pid));
    process.kill(pid, 'SIGKILL');
    await until(`${victim} (pid ${pid}) gone`, () => !alive(pid), 5000);
    const survivors = cluster.names().filter((n) => n !== victim);
    // At once, before a health check has seen it: the refused connection is
    // retried on another replica.
    await checked(async (saw) => {
      for (const key of itsKeys) assert.notEqual(saw(await chat({ session: key })), victim, `key ${key} answered elsewhere`);
    }, survivors);
    await until(`HAProxy marks ${victim} down`, async () => (await serverStates(cluster.socket))[victim] === 'DOWN');
    const moved = new Map();
    await checked(async (saw) => {
      for (const key of itsKeys) moved.set(key, saw(await chat({ session: key })));
      for (let round = 0; round < 2; round++) {
        for (const key of KEYS) {
          const expect = home.get(key) === victim ? moved.get(key) : home.get(key);
          assert.equal(saw(await chat({ session: key })), expect, `key ${key} on ${expect}`);
        }
      }
    }, survivors);
    for (const [key, r] of moved) assert.ok(survivors.includes(r), `key ${key} moved to a live replica (${r})`);
  });

  await t.test('(d) local-cluster.sh status, restart, then down: nothing left running', async () => {
    const victim = Object.entries(await serverStates(cluster.socket)).find(([, s]) => s === 'DOWN')?.[0];
    assert.ok(victim, 'the killed replica is still down');
    const st = await cluster.script(['status']);
    assert.equal(st.code, 3, `status exits 3 while a part is down:\n${st.stdout}${st.stderr}`);
    const lines = Object.fromEntries(st.stdout.trim().split('\n').slice(1).map((l) => [l.split(/\s+/)[0], l]));
    assert.deepEqual(Object.keys(lines).sort(), ['haproxy', 'r1', 'r2', 'r3', 'redis'], st.stdout);
    const pids = cluster.pids();
    for (const [name, line] of Object.entries(lines)) {
      if (name === victim) {
        assert.match(line, /not running/, line);
      } else {
        const port = name === 'haproxy' ? cluster.lbPort : name === 'redis' ? cluster.redisPort : cluster.replicaPort(name);
        assert.match(line, new RegExp(`pid ${pids[name]}\\s+port ${port}\\s+(200|PONG)$`), line);
      }
    }
    // restart K: the killed replica back, with its caches emptied, and HAProxy sends to it again
    const rs = await cluster.script(['restart', victim.slice(1), '--fresh']);
    assert.equal(rs.code, 0, `restart ${victim}: ${rs.stderr}`);
    assert.match(rs.stderr, /caches emptied/);
    const back = await cluster.script(['status']);
    assert.equal(back.code, 0, `status exits 0 once every part runs again:\n${back.stdout}${back.stderr}`);
    await until(`HAProxy marks ${victim} up`, async () => (await serverStates(cluster.socket))[victim] === 'UP');
    const running = cluster.pids();
    assert.ok(alive(running[victim]) && running[victim] !== pids[victim], `${victim} runs, in a new process`);
    oneConn.close();
    const down = await cluster.down();
    assert.equal(down.code, 0, down.stderr);
    for (const [name, pid] of Object.entries(running)) assert.ok(!alive(pid), `${name} (pid ${pid}) stopped`);
    assert.deepEqual(cluster.pids(), {}, 'no pid file is left');
    for (const port of [cluster.lbPort, cluster.redisPort, ...cluster.names().map((n) => cluster.replicaPort(n))]) {
      assert.equal(await listening(port), false, `nothing listens on ${port}`);
    }
    const again = await cluster.down();
    assert.equal(again.code, 0, `down again is no error: ${again.stderr}`);
    const after = await cluster.script(['status']);
    assert.equal(after.code, 3);
    assert.match(after.stdout, /nothing runs/);
  });
});
