// Progress and logs as an operator meets them: the port bound before the
// model loads (a port taken fails at once; /health says "loading" with its
// progress until ready, other requests 503 with Retry-After), X-Request-Id
// on every answer (the client's when sane), log lines with ISO timestamps
// and start and end lines naming the request (--log-format text and json),
// and SSE keep-alive comments while a long prompt is prefilled.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';

import { BIN, MMPROJ, MODEL, TEST_BIN, get, post, sleep, startServer, stopServer } from './helpers.mjs';

const cache = mkdtempSync(join(tmpdir(), 'pinhole-progress-'));
after(() => rmSync(cache, { recursive: true, force: true }));

/** `pinhole-test serve ARGS` (or bin) with env; resolves {proc, err(), exited} at once. */
function spawnServe(args, env = {}, bin = TEST_BIN) {
  const inherited = { ...process.env };
  delete inherited.PINHOLE_API_KEY; // a key of the caller's shell would lock the tests out
  const proc = spawn(bin, ['serve', '-m', MODEL, '--mmproj', MMPROJ, '-t', '2', ...args], {
    stdio: ['ignore', 'ignore', 'pipe'],
    env: { ...inherited, XDG_CACHE_HOME: cache, ...env },
  });
  let err = '';
  proc.stderr.setEncoding('utf8');
  proc.stderr.on('data', (d) => { err += d; });
  const exited = new Promise((resolve) => proc.on('exit', (code, signal) => resolve({ code, signal })));
  return { proc, err: () => err, exited };
}

/** Waits (at most ms) until re matches the stderr so far: the match. */
async function waitFor(s, re, ms = 30_000) {
  const t0 = Date.now();
  for (;;) {
    const m = re.exec(s.err());
    if (m) return m;
    if (Date.now() - t0 > ms) throw new Error(`no ${re} within ${ms} ms; stderr:\n${s.err()}`);
    await sleep(20);
  }
}

const ISO = /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/;
const chat = (extra = {}) => ({ messages: [{ role: 'user', content: 'Say hi.' }], max_tokens: 3, ...extra });

describe('the port before the model', { timeout: 120_000 }, () => {
  test('a port taken fails at once, before loading, with a message that says so', async () => {
    const taken = createServer();
    await new Promise((r) => taken.listen(0, '127.0.0.1', r));
    const port = taken.address().port;
    try {
      const t0 = Date.now();
      // the loading would take 5 s more: the refusal comes before it
      const s = spawnServe(['--port', String(port)], { PINHOLE_TEST_LOAD_DELAY_MS: '5000' });
      const { code } = await s.exited;
      const ms = Date.now() - t0;
      assert.notEqual(code, 0);
      assert.ok(ms < 2000, `exited after ${ms} ms`);
      assert.match(s.err(), new RegExp(`cannot listen on 127\\.0\\.0\\.1:${port}: Address already in use .*--port`));
      assert.doesNotMatch(s.err(), /loading the model/);
    } finally {
      taken.close();
    }
  });

  test('the shipped pinhole ignores the test hooks (only pinhole-test reads PINHOLE_TEST_*)', async () => {
    const s = spawnServe(['--port', '0'], { PINHOLE_TEST_LOAD_DELAY_MS: '600000' }, BIN);
    try {
      await waitFor(s, /listening on http:\/\/127\.0\.0\.1:\d+/, 30_000); // not 10 minutes later
    } finally {
      s.proc.kill('SIGTERM');
      await s.exited;
    }
  });

  test('/health answers 503 loading with its progress until the model is ready, other requests 503', async () => {
    const s = spawnServe(['--port', '0'], { PINHOLE_TEST_LOAD_DELAY_MS: '2500' });
    try {
      const port = Number((await waitFor(s, /bound to http:\/\/127\.0\.0\.1:(\d+)/))[1]);
      const url = `http://127.0.0.1:${port}`;
      await waitFor(s, /loading the model$/m); // the delay is in this step
      const h = await fetch(`${url}/health`);
      assert.equal(h.status, 503);
      assert.equal(h.headers.get('retry-after'), '1');
      assert.match(h.headers.get('x-request-id'), /^[0-9a-f]{16}$/);
      const body = await h.json();
      assert.equal(body.status, 'loading');
      assert.ok(body.progress >= 0.2 && body.progress < 1, `progress ${body.progress}`);
      const c = await fetch(`${url}/v1/chat/completions`, {
        method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(chat()),
      });
      assert.equal(c.status, 503);
      assert.equal(c.headers.get('retry-after'), '1');
      assert.match((await c.json()).error.message, /still loading/);
      const m = await fetch(`${url}/v1/models`);
      assert.equal(m.status, 503);
      await m.text();
      assert.doesNotMatch(s.err(), /listening on/);
      await waitFor(s, /listening on http:\/\/127\.0\.0\.1:(\d+)/);
      const ok = await fetch(`${url}/health`);
      assert.equal(ok.status, 200);
      assert.deepEqual(await ok.json(), { status: 'ok' });
      const answer = await fetch(`${url}/v1/chat/completions`, {
        method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(chat()),
      });
      assert.equal(answer.status, 200);
      await answer.json();
    } finally {
      s.proc.kill('SIGTERM');
      await s.exited;
    }
  });
});

describe('X-Request-Id and text logs', { timeout: 120_000 }, () => {
  let srv;
  before(async () => { srv = await startServer({ extra: ['--api-key', 'k-progress-logs-1234567890'] }); });
  after(() => stopServer(srv));
  const auth = { authorization: 'Bearer k-progress-logs-1234567890' };

  test('every answer carries one: made up, or the client\'s when sane', async () => {
    const idOf = async (path, init) => {
      const r = await fetch(srv.url + path, init);
      await r.text();
      return { status: r.status, id: r.headers.get('x-request-id') };
    };
    const postInit = (body, headers = {}) => ({
      method: 'POST', headers: { 'content-type': 'application/json', ...auth, ...headers }, body,
    });
    const cases = [
      [200, '/v1/chat/completions', postInit(JSON.stringify(chat()))],
      [200, '/health', {}],
      [400, '/v1/chat/completions', postInit('{not json')],
      [401, '/v1/chat/completions', { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{}' }],
      [404, '/nowhere', { headers: auth }],
      [415, '/v1/chat/completions', postInit('{}', { 'content-type': 'text/plain' })],
    ];
    const seen = new Set();
    for (const [status, path, init] of cases) {
      const r = await idOf(path, init);
      assert.equal(r.status, status, path);
      assert.match(r.id ?? '', /^[0-9a-f]{16}$/, `${status} ${path}`);
      seen.add(r.id);
    }
    assert.equal(seen.size, cases.length, 'a new id each time');
    // the client's own id is echoed when sane: 1 to 64 of [A-Za-z0-9._-]
    const mine = 'trace.A-1_' + 'x'.repeat(54);
    assert.equal((await idOf('/v1/chat/completions', postInit(JSON.stringify(chat()), { 'x-request-id': mine }))).id, mine);
    assert.equal((await idOf('/nowhere', { headers: { ...auth, 'x-request-id': 'mine-404' } })).id, 'mine-404');
    for (const bad of ['x'.repeat(65), 'a b', 'id"quote', 'semi;colon', '%C3%A9']) {
      const r = await idOf('/health', { headers: { 'x-request-id': bad } });
      assert.match(r.id, /^[0-9a-f]{16}$/, `'${bad}' is replaced`);
    }
  });

  test('each line starts with an ISO timestamp; a request has a start and an end line', async () => {
    const id = 'text-log-check-1';
    const r = await post(srv, '/v1/chat/completions', chat(), { ...auth, 'x-request-id': id });
    assert.equal(r.status, 200);
    const end = new RegExp(`pinhole: end POST /v1/chat/completions from 127\\.0\\.0\\.1 id=${id} 200 in \\d+ ms: ` +
                           'prompt \\d+ \\(reused \\d+, prefilled \\d+\\), generated 3');
    const t0 = Date.now();
    while (!end.test(srv.stderr) && Date.now() - t0 < 5000) await sleep(20);
    assert.match(srv.stderr, end);
    assert.match(srv.stderr, new RegExp(`pinhole: start POST /v1/chat/completions from 127\\.0\\.0\\.1 id=${id}\\n`));
    for (const line of srv.stderr.split('\n').filter(Boolean)) {
      assert.match(line.split(' ')[0], ISO, line);
      assert.match(line, /^\S+ pinhole: /, line);
    }
  });
});

describe('why a request ended as it did (issue 23, item 4)', { timeout: 120_000 }, () => {
  let srv;
  before(async () => { srv = await startServer({ vision: false, extra: ['--api-key', 'k-progress-logs-1234567890'] }); });
  after(() => stopServer(srv));
  const auth = { authorization: 'Bearer k-progress-logs-1234567890' };
  const endLine = async (id) => {
    const re = new RegExp(`^.* pinhole: end \\S+ \\S+ from 127\\.0\\.0\\.1 id=${id} .*$`, 'm');
    const t0 = Date.now();
    while (!re.test(srv.stderr) && Date.now() - t0 < 10_000) await sleep(20);
    assert.match(srv.stderr, re);
    return re.exec(srv.stderr)[0];
  };

  test('a refused request\'s end line has the error\'s type and message', async () => {
    const cases = [
      ['refused-json', '/v1/chat/completions', '{not json', auth,
        /400 in \d+ ms: invalid_request_error: the body is not valid JSON/],
      ['refused-key', '/v1/chat/completions', JSON.stringify(chat()), {},
        /401 in \d+ ms: authentication_error: a valid API key is required/],
      ['refused-anthropic', '/v1/messages', JSON.stringify({ messages: [] }), auth,
        /400 in \d+ ms: invalid_request_error: \S/],
      ['refused-long', '/v1/chat/completions', JSON.stringify(chat({ max_tokens: -1 })), auth,
        /400 in \d+ ms: invalid_request_error: .*max_tokens/],
    ];
    for (const [id, path, body, headers, want] of cases) {
      const r = await post(srv, path, body, { ...headers, 'x-request-id': id });
      assert.ok(r.status >= 400, `${id}: ${r.status}`);
      assert.match(await endLine(id), want);
    }
  });

  test('a client that leaves a stream: one end line, after the turn\'s, and it says cancelled', async () => {
    const id = 'left-mid-stream';
    const ac = new AbortController();
    const r = await fetch(`${srv.url}/v1/chat/completions`, {
      method: 'POST', signal: ac.signal,
      headers: { 'content-type': 'application/json', ...auth, 'x-request-id': id },
      body: JSON.stringify({ messages: [{ role: 'user', content: 'Tell me a long story.' }], max_tokens: 3000, stream: true }),
    });
    assert.equal(r.status, 200);
    const reader = r.body.getReader();
    await reader.read();
    await reader.read();
    ac.abort();
    const end = await endLine(id);
    assert.match(end, /200 in \d+ ms: cancelled: the client went away before its answer was complete; prompt \d+ .*generated \d+/);
    await sleep(300);
    const mine = srv.stderr.split('\n').filter((l) => l.includes(`id=${id}`));
    assert.equal(mine.filter((l) => / pinhole: end /.test(l)).length, 1, mine.join('\n'));
    const turn = mine.findIndex((l) => /chat_completions cancelled: prompt/.test(l));
    const last = mine.findIndex((l) => / pinhole: end /.test(l));
    assert.ok(turn >= 0 && turn < last, `the turn's line, then the end line:\n${mine.join('\n')}`);
  });
});

describe('Ctrl-C says what it stopped and what it saved (issue 23, item 5)', { timeout: 120_000 }, () => {
  test('SIGINT: the stop line names the signal and the requests, then how long it took and the checkpoints written', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'pinhole-stop-'));
    try {
      const s = spawnServe(['--port', '0', '--kv-disk-dir', dir]);
      const port = Number((await waitFor(s, /listening on http:\/\/127\.0\.0\.1:(\d+)/))[1]);
      const r = await post({ url: `http://127.0.0.1:${port}` }, '/v1/chat/completions',
        { model: 'tiny-f16', messages: [{ role: 'user', content: 'Hi.' }], max_tokens: 4 });
      assert.equal(r.status, 200);
      s.proc.kill('SIGINT');
      const { code } = await s.exited;
      assert.equal(code, 0);
      assert.match(s.err(), /interrupted \(SIGINT\), stopping: no new requests; no request was running; 0 queued refused/);
      assert.match(s.err(), /the server stopped in \d+\.\d\d s/);
      assert.match(s.err(), /shutdown: the live conversation \(\d+ rows\) and what was queued: \d+ block records written \([\d.]+ MiB\), \d+ not written/);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe('--log-format json', { timeout: 120_000 }, () => {
  test('every line is a JSON object; a request\'s start and end lines carry its id, client, method, path', async () => {
    const srv = await startServer({ extra: ['--log-format', 'json'] });
    const id = 'json-log-check-1';
    try {
      const r = await post(srv, '/v1/chat/completions', chat(), { 'x-request-id': id });
      assert.equal(r.status, 200);
      const bad = await post(srv, '/v1/chat/completions', '{oops', { 'x-request-id': 'json-log-bad' });
      assert.equal(bad.status, 400);
      const t0 = Date.now();
      while (!/"id":"json-log-bad"[^\n]*"event":"end"/.test(srv.stderr) && Date.now() - t0 < 5000) await sleep(20);
    } finally {
      await stopServer(srv);
    }
    const lines = srv.stderr.split('\n').filter(Boolean).map((l) => {
      try { return JSON.parse(l); } catch { assert.fail(`not JSON: ${l}`); }
    });
    for (const l of lines) {
      assert.match(l.ts, ISO);
      assert.ok(['debug', 'info', 'warning', 'error'].includes(l.level), JSON.stringify(l));
      assert.equal(typeof l.msg, 'string');
    }
    assert.ok(lines.some((l) => /^listening on http:/.test(l.msg)));
    const mine = lines.filter((l) => l.id === id);
    const start = mine.find((l) => l.event === 'start'), end = mine.find((l) => l.event === 'end');
    assert.ok(start && end, JSON.stringify(mine));
    for (const l of [start, end]) {
      assert.equal(l.client, '127.0.0.1');
      assert.equal(l.method, 'POST');
      assert.equal(l.path, '/v1/chat/completions');
    }
    assert.equal(end.status, 200);
    assert.equal(typeof end.ms, 'number');
    assert.equal(end.completion_tokens, 3);
    assert.ok(end.prompt_tokens > 0 && end.prefilled_tokens + end.reused_tokens === end.prompt_tokens);
    assert.ok(mine.some((l) => !l.event && /done: prompt/.test(l.msg)), 'the turn\'s own line names the request');
    const badEnd = lines.find((l) => l.id === 'json-log-bad' && l.event === 'end');
    assert.equal(badEnd?.status, 400);
    assert.equal(badEnd.error_type, 'invalid_request_error');
    assert.match(badEnd.error, /^the body is not valid JSON/);
    assert.equal(end.error_type, undefined, 'a request that went well has no error');
  });

  test('a bad --log-format is refused', async () => {
    const s = spawnServe(['--log-format', 'yaml']);
    const { code } = await s.exited;
    assert.equal(code, 2);
    assert.match(s.err(), /--log-format 'yaml': give text or json/);
  });
});

describe('keep-alive while a long prompt is prefilled', { timeout: 120_000 }, () => {
  // each prefill chunk (512 rows) takes 2 s more: about 10 s for this prompt
  let srv;
  before(async () => { srv = await startServer({ vision: false, bin: TEST_BIN, env: { PINHOLE_TEST_PREFILL_DELAY_MS: '2000' } }); });
  after(() => stopServer(srv));

  test('the stream begins and sends keep-alive comments before the first token', async () => {
    const content = 'the river runs to the sea '.repeat(400);
    const t0 = Date.now();
    const r = await fetch(`${srv.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ messages: [{ role: 'user', content }], max_tokens: 2, stream: true }),
    });
    assert.equal(r.status, 200);
    const headersMs = Date.now() - t0;
    assert.ok(headersMs < 4000, `the stream began after ${headersMs} ms`);
    const text = await r.text();
    const ping = text.indexOf(': keep-alive');
    const firstToken = text.search(/"content":"[^"]/);
    assert.ok(ping >= 0, `no keep-alive comment in:\n${text.slice(0, 500)}`);
    assert.ok(firstToken < 0 || ping < firstToken, 'the comment came before the first token');
    assert.match(text, /data: \[DONE\]\s*$/);
  });
});
