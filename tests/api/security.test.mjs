// Browser exposure and key handling (issue 13, items 4 and 5): no CORS
// headers unless --cors-origin, JSON bodies only (a page's text/plain POST
// needs no preflight), the Host header against DNS rebinding, /metrics
// behind the key, the keys from a file (one a line) or PINHOLE_API_KEY,
// and an unauthorised body refused before it is read.
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { chmodSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import http from 'node:http';
import net from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { promisify } from 'node:util';

import {
  anthropic, BIN, chatResult, checkAnthropicErrorBody, checkOpenAIErrorBody, metric, metrics, MODEL, MODEL_ID, openai,
  openaiError, startServer, stopServer, withServer,
} from './helpers.mjs';

const HELLO = [{ role: 'user', content: 'Say something.' }];
const CHAT = { model: MODEL_ID, messages: HELLO, max_tokens: 2, temperature: 0 };
const MSG = { model: MODEL_ID, messages: HELLO, max_tokens: 2, temperature: 0 };
const RESP = { model: MODEL_ID, input: 'hi', max_output_tokens: 2 };
const EVIL = 'http://evil.example';

// One request through node:http (which, unlike fetch, lets the Host header
// be set): {status, headers, text, json}.
function raw(srv, { method = 'GET', path = '/health', headers = {}, body = null } = {}) {
  return new Promise((resolve, reject) => {
    const req = http.request(`${srv.url}${path}`, { method, headers, agent: false });
    req.on('response', (r) => {
      let text = '';
      r.setEncoding('utf8');
      r.on('data', (d) => { text += d; });
      r.on('end', () => {
        let json = null;
        try { json = JSON.parse(text); } catch { /* not JSON */ }
        resolve({ status: r.statusCode, headers: r.headers, text, json });
      });
    });
    req.on('error', reject);
    req.end(body ?? undefined);
  });
}

const jsonPost = (path, body, headers = {}) => ({
  method: 'POST', path, body: JSON.stringify(body), headers: { 'content-type': 'application/json', ...headers },
});

function noCors(r, what) {
  for (const h of Object.keys(r.headers)) assert.ok(!h.startsWith('access-control-'), `${what}: no CORS header (${h}: ${r.headers[h]})`);
}

// `pinhole serve ARGS` that must refuse to start: {code, stderr}.
async function serveFails(args, env = {}) {
  try {
    await promisify(execFile)(BIN, ['serve', '-m', MODEL, '--port', '0', '-t', '1', ...args], {
      env: { ...process.env, ...env }, timeout: 60_000,
    });
  } catch (e) {
    return { code: e.code, stderr: e.stderr };
  }
  assert.fail(`pinhole serve ${args.join(' ')} started`);
}

describe('security: default server (no --cors-origin, no --allow-host)', { timeout: 300_000 }, () => {
  let srv;
  before(async () => { srv = await startServer({ vision: false }); });
  after(() => stopServer(srv));

  test('a page\'s cross-origin text/plain POST is refused with 415, nothing runs, no CORS header', async () => {
    const gen0 = metric(await metrics(srv), 'pinhole_generated_tokens_total');
    for (const [path, body, anth] of [['/v1/chat/completions', CHAT, false], ['/v1/responses', RESP, false],
      ['/v1/messages', MSG, true], ['/v1/messages/count_tokens', { model: MODEL_ID, messages: HELLO }, true]]) {
      for (const type of ['text/plain;charset=UTF-8', 'application/x-www-form-urlencoded', 'multipart/form-data; boundary=x', null]) {
        const headers = { origin: EVIL };
        if (type) headers['content-type'] = type;
        const r = await raw(srv, { method: 'POST', path, headers, body: JSON.stringify(body) });
        assert.equal(r.status, 415, `${path} as ${type}`);
        noCors(r, `${path} as ${type}`);
        assert.match(r.headers['content-type'], /^application\/json/);
        if (anth) checkAnthropicErrorBody(r.json, 'invalid_request_error', /application\/json/);
        else checkOpenAIErrorBody(r.json, /application\/json/);
      }
    }
    const s = await metrics(srv);
    assert.equal(metric(s, 'pinhole_generated_tokens_total'), gen0, 'no generation ran');
    assert.equal(metric(s, 'pinhole_requests_total', { endpoint: 'chat_completions', status: '415' }), 4);
  });

  test('application/json with parameters is accepted; answers carry no CORS header', async () => {
    const r = await raw(srv, jsonPost('/v1/chat/completions', CHAT, { 'content-type': 'Application/JSON; charset=utf-8' }));
    assert.equal(r.status, 200, r.text);
    noCors(r, 'a JSON POST');
    const o = await raw(srv, jsonPost('/v1/chat/completions', CHAT, { origin: EVIL }));
    assert.equal(o.status, 200);
    noCors(o, 'a JSON POST with an Origin');
    for (const path of ['/v1/models', '/metrics', '/health']) noCors(await raw(srv, { path, headers: { origin: EVIL } }), path);
    // the clients send application/json and work as before
    assert.ok(chatResult(await openai(srv).chat.completions.create(CHAT)).prompt > 0);
    assert.equal((await anthropic(srv).messages.create(MSG)).type, 'message');
  });

  test('a CORS preflight is refused without --cors-origin', async () => {
    const r = await raw(srv, {
      method: 'OPTIONS', path: '/v1/chat/completions',
      headers: { origin: EVIL, 'access-control-request-method': 'POST', 'access-control-request-headers': 'content-type' },
    });
    assert.equal(r.status, 403);
    noCors(r, 'the preflight');
    checkOpenAIErrorBody(r.json, /--cors-origin/);
    const plain = await raw(srv, { method: 'OPTIONS', path: '/v1/chat/completions' });
    assert.equal(plain.status, 204);
    noCors(plain, 'a plain OPTIONS');
  });

  test('a foreign Host is refused with 403 before anything runs; loopback names pass', async () => {
    const gen0 = metric(await metrics(srv), 'pinhole_generated_tokens_total');
    for (const host of ['evil.example', `evil.example:${srv.port}`, `attacker.localhost.evil.example:${srv.port}`,
      '10.0.0.1', `[fe80::1]:${srv.port}`, `localhost.evil.example:${srv.port}`, `127.0.0.1.evil.example`]) {
      const g = await raw(srv, { path: '/metrics', headers: { host } });
      assert.equal(g.status, 403, `GET /metrics for Host ${host}`);
      checkOpenAIErrorBody(g.json, /--allow-host/);
      const p = await raw(srv, jsonPost('/v1/chat/completions', CHAT, { host }));
      assert.equal(p.status, 403, `POST for Host ${host}`);
      checkOpenAIErrorBody(p.json);
      const m = await raw(srv, jsonPost('/v1/messages', MSG, { host }));
      assert.equal(m.status, 403);
      checkAnthropicErrorBody(m.json, 'permission_error', /--allow-host/);
    }
    assert.equal(metric(await metrics(srv), 'pinhole_generated_tokens_total'), gen0, 'no generation ran');
    for (const host of ['localhost', `localhost:${srv.port}`, `LocalHost:${srv.port}`, `127.0.0.1:${srv.port}`, '127.0.0.1',
      `127.1.2.3:${srv.port}`, `[::1]:${srv.port}`, '[::1]']) {
      assert.equal((await raw(srv, { path: '/health', headers: { host } })).status, 200, `Host ${host}`);
      assert.equal((await raw(srv, jsonPost('/v1/chat/completions', CHAT, { host }))).status, 200, `POST for Host ${host}`);
    }
  });

  test('a request without Host (HTTP/1.0) passes', async () => {
    const text = await new Promise((resolve, reject) => {
      const sock = net.connect(srv.port, '127.0.0.1', () => sock.write('GET /health HTTP/1.0\r\n\r\n'));
      let got = '';
      sock.setEncoding('utf8');
      sock.on('data', (d) => { got += d; });
      sock.on('end', () => resolve(got));
      sock.on('error', reject);
    });
    assert.match(text, /^HTTP\/1\.[01] 200/);
    assert.match(text, /"status":"ok"/);
  });
});

describe('security: --cors-origin and --allow-host', { timeout: 300_000 }, () => {
  const APP = 'http://app.example:3000';
  let srv;
  before(async () => {
    srv = await startServer({
      vision: false,
      extra: ['--cors-origin', APP, '--cors-origin', 'https://other.example', '--allow-host', 'pinhole.lan',
        '--allow-host', 'box.lan:9999'],
    });
  });
  after(() => stopServer(srv));

  test('a preflight from a listed origin is answered; the origin is reflected with Vary: Origin', async () => {
    const pre = await raw(srv, {
      method: 'OPTIONS', path: '/v1/chat/completions',
      headers: { origin: APP, 'access-control-request-method': 'POST', 'access-control-request-headers': 'authorization, content-type' },
    });
    assert.equal(pre.status, 204);
    assert.equal(pre.headers['access-control-allow-origin'], APP);
    assert.match(pre.headers['access-control-allow-methods'], /POST/);
    assert.match(pre.headers['access-control-allow-headers'], /content-type/i);
    assert.match(pre.headers['access-control-allow-headers'], /authorization/i);
    assert.match(pre.headers.vary, /Origin/);
    const r = await raw(srv, jsonPost('/v1/chat/completions', CHAT, { origin: APP }));
    assert.equal(r.status, 200);
    assert.equal(r.headers['access-control-allow-origin'], APP);
    assert.match(r.headers.vary, /Origin/);
    // the page may read the request's id
    assert.match(r.headers['x-request-id'], /^[0-9a-f]{16}$/);
    assert.equal(r.headers['access-control-expose-headers'], 'X-Request-Id, X-Pinhole-Ignored-Fields');
    const o = await raw(srv, { path: '/v1/models', headers: { origin: 'https://other.example' } });
    assert.equal(o.headers['access-control-allow-origin'], 'https://other.example');
    // a streamed answer too
    const st = await raw(srv, jsonPost('/v1/chat/completions', { ...CHAT, stream: true }, { origin: APP }));
    assert.equal(st.status, 200);
    assert.match(st.headers['content-type'], /^text\/event-stream/);
    assert.equal(st.headers['access-control-allow-origin'], APP);
  });

  test('an origin not listed gets no CORS header and its preflight 403; text/plain is still 415', async () => {
    const pre = await raw(srv, {
      method: 'OPTIONS', path: '/v1/messages', headers: { origin: EVIL, 'access-control-request-method': 'POST' },
    });
    assert.equal(pre.status, 403);
    noCors(pre, 'the preflight');
    checkAnthropicErrorBody(pre.json, 'permission_error');
    const r = await raw(srv, jsonPost('/v1/chat/completions', CHAT, { origin: EVIL }));
    assert.equal(r.headers['access-control-allow-origin'], undefined);
    assert.match(r.headers.vary, /Origin/);
    const t = await raw(srv, { method: 'POST', path: '/v1/chat/completions', headers: { origin: APP, 'content-type': 'text/plain' }, body: JSON.stringify(CHAT) });
    assert.equal(t.status, 415);
  });

  test('--allow-host admits its names (any port, or the one given); others are still refused', async () => {
    for (const host of ['pinhole.lan', `pinhole.lan:${srv.port}`, 'PINHOLE.LAN:1', 'box.lan:9999', `localhost:${srv.port}`])
      assert.equal((await raw(srv, { path: '/health', headers: { host } })).status, 200, `Host ${host}`);
    for (const host of ['evil.example', 'box.lan', 'box.lan:9998', 'pinhole.lan.evil.example'])
      assert.equal((await raw(srv, { path: '/health', headers: { host } })).status, 403, `Host ${host}`);
  });
});

test('--cors-origin * reflects any origin; --allow-host * admits any Host', { timeout: 120_000 }, async () => {
  await withServer({ vision: false, extra: ['--cors-origin', '*', '--allow-host', '*'] }, async (srv) => {
    const r = await raw(srv, { path: '/v1/models', headers: { origin: EVIL, host: 'anything.example' } });
    assert.equal(r.status, 200);
    assert.equal(r.headers['access-control-allow-origin'], EVIL);
  });
});

test('bad --cors-origin and --allow-host values are refused at start', { timeout: 120_000 }, async () => {
  for (const v of ['http://app.example/', 'app.example', 'http://a.example/path', 'null']) {
    const r = await serveFails(['--cors-origin', v]);
    assert.equal(r.code, 2, v);
    assert.match(r.stderr, /--cors-origin '.*' is not an origin/);
  }
  const r = await serveFails(['--allow-host', '']);
  assert.equal(r.code, 2);
  assert.match(r.stderr, /--allow-host '' is not a host name/);
});

// ---- item 5: the key ----------------------------------------------------------

const KEY = 'sk-pinhole-test-0123456789';

// Checks that only `key` opens the server: the API endpoints, /v1/models and /metrics.
async function onlyKeyWorks(srv, key) {
  const wrong = [
    `${key.slice(0, -1)}X`, // same length, last byte differs
    `X${key.slice(1)}`, // same length, first byte differs
    key.slice(0, -1), // a prefix
    `${key}0`, // longer
    'sk-short', '', key.toUpperCase(),
  ];
  for (const w of wrong) {
    await openaiError(openai(srv, { apiKey: w || 'none' }).chat.completions.create(CHAT), 401);
    const r = await raw(srv, jsonPost('/v1/messages', MSG, { 'x-api-key': w }));
    assert.equal(r.status, 401, `x-api-key '${w}'`);
    checkAnthropicErrorBody(r.json, 'authentication_error');
    assert.equal((await raw(srv, { path: '/metrics', headers: { authorization: `Bearer ${w}` } })).status, 401, `/metrics with '${w}'`);
  }
  assert.ok(chatResult(await openai(srv, { apiKey: key }).chat.completions.create(CHAT)).prompt > 0);
  assert.equal((await anthropic(srv, { apiKey: key }).messages.create(MSG)).type, 'message');
  assert.equal((await raw(srv, { path: '/v1/models', headers: { 'x-api-key': key } })).status, 200);
}

describe('security: the API key', { timeout: 300_000 }, () => {
  test('--api-key: /metrics needs the key (either header), /health does not; wrong keys of any length are 401', async () => {
    await withServer({ vision: false, extra: ['--api-key', KEY] }, async (srv) => {
      const m = await raw(srv, { path: '/metrics' });
      assert.equal(m.status, 401);
      checkOpenAIErrorBody(m.json);
      assert.doesNotMatch(m.text, /pinhole_requests_total/);
      assert.equal((await raw(srv, { path: '/v1/models' })).status, 401);
      const ok1 = await raw(srv, { path: '/metrics', headers: { authorization: `Bearer ${KEY}` } });
      assert.equal(ok1.status, 200);
      assert.match(ok1.text, /pinhole_requests_total/);
      assert.equal((await raw(srv, { path: '/metrics', headers: { 'x-api-key': KEY } })).status, 200);
      assert.equal((await raw(srv, { path: '/health' })).status, 200);
      await onlyKeyWorks(srv, KEY);
    });
  });

  test('--api-key-file: the key of its one line (blank lines and # comments skipped), not on the command line', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'pinhole-key-'));
    try {
      const file = join(dir, 'key');
      writeFileSync(file, `# the server's key\n\n${KEY}\n   \n`, { mode: 0o600 });
      chmodSync(file, 0o600);
      await withServer({ vision: false, extra: ['--api-key-file', file] }, async (srv) => {
        const cmdline = readFileSync(`/proc/${srv.proc.pid}/cmdline`, 'utf8');
        assert.ok(cmdline.includes(file), 'the file is on the command line');
        assert.ok(!cmdline.includes(KEY), 'the key is not');
        assert.doesNotMatch(srv.stderr, /warning/);
        assert.match(srv.stderr, /API key is required \(from --api-key-file\)/);
        assert.doesNotMatch(srv.stderr, new RegExp(KEY));
        await onlyKeyWorks(srv, KEY);
      });
      // CRLF line ending; group/other-readable: works, with a warning
      writeFileSync(file, `${KEY}\r\n`);
      chmodSync(file, 0o644);
      await withServer({ vision: false, extra: ['--api-key-file', file] }, async (srv) => {
        assert.match(srv.stderr, /warning: --api-key-file .* can be read by group or others/);
        assert.equal((await raw(srv, { path: '/metrics', headers: { 'x-api-key': KEY } })).status, 200);
      });
      // refused: a file without a key, a bad key, a key twice, a missing file, both flags
      for (const content of ['', '\n', '# a comment\n\n   \n']) {
        writeFileSync(file, content);
        chmodSync(file, 0o600);
        const r = await serveFails(['--api-key-file', file]);
        assert.equal(r.code, 2, JSON.stringify(content));
        assert.match(r.stderr, /--api-key-file .*no key in it \(it is empty/);
      }
      for (const [content, why] of [[`${KEY}\n sk-indented\n`, /line 2: the key starts or ends with a space/],
                                    [`${KEY}\nsk-a\tb\n`, /line 2: the key has a control character/],
                                    [`${KEY}\n\n${KEY}\n`, /line 3: the same key as an earlier line/]]) {
        writeFileSync(file, content);
        const r = await serveFails(['--api-key-file', file]);
        assert.equal(r.code, 2, JSON.stringify(content));
        assert.match(r.stderr, why);
        assert.doesNotMatch(r.stderr, new RegExp(KEY), 'no key in the message');
      }
      const missing = await serveFails(['--api-key-file', join(dir, 'nope')]);
      assert.equal(missing.code, 2);
      assert.match(missing.stderr, /--api-key-file .*nope/);
      writeFileSync(file, `${KEY}\n`, { mode: 0o600 });
      const both = await serveFails(['--api-key', KEY, '--api-key-file', file]);
      assert.equal(both.code, 2);
      assert.match(both.stderr, /not both/);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  test('--api-key-file with several keys: each opens the server, two different keys in one request do not', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'pinhole-key-'));
    try {
      const file = join(dir, 'keys');
      const KEY2 = 'sk-pinhole-test-second-key';
      writeFileSync(file, `# alice\n${KEY}\n# bob\n${KEY2}\r\n`, { mode: 0o600 });
      await withServer({ vision: false, extra: ['--api-key-file', file] }, async (srv) => {
        assert.match(srv.stderr, /one of 2 API keys is required \(from --api-key-file\); each key's requests are isolated/);
        await onlyKeyWorks(srv, KEY);
        await onlyKeyWorks(srv, KEY2);
        const both = await raw(srv, { path: '/metrics', headers: { 'x-api-key': KEY, authorization: `Bearer ${KEY2}` } });
        assert.equal(both.status, 401, 'two different keys: which one would it be?');
        const same = await raw(srv, { path: '/metrics', headers: { 'x-api-key': KEY2, authorization: `Bearer ${KEY2}` } });
        assert.equal(same.status, 200);
      });
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  test('a valid key beside a different credential, or a key header given twice, is 401 (issue 23, item 10)', async () => {
    await withServer({ vision: false, extra: ['--api-key', KEY] }, async (srv) => {
      // node:http takes a flat [name, value, ...] list for repeated headers
      // (and then adds no Host of its own)
      const get = (headers) => raw(srv, { path: '/v1/models', headers: Array.isArray(headers) ? ['Host', 'localhost', ...headers] : headers });
      assert.equal((await get({ authorization: `Bearer ${KEY}` })).status, 200);
      assert.equal((await get({ 'x-api-key': KEY, authorization: `Bearer ${KEY}` })).status, 200, 'the same key in both');
      for (const [what, headers] of [
        ['a valid Authorization and a bogus x-api-key', { authorization: `Bearer ${KEY}`, 'x-api-key': 'sk-bogus' }],
        ['a valid x-api-key and a bogus Authorization', { 'x-api-key': KEY, authorization: 'Bearer sk-bogus' }],
        ['a valid x-api-key and a Basic Authorization', { 'x-api-key': KEY, authorization: 'Basic dXNlcjpwYXNz' }],
        ['two Authorization headers, the first valid', ['Authorization', `Bearer ${KEY}`, 'Authorization', 'Bearer sk-bogus']],
        ['two Authorization headers, the second valid', ['Authorization', 'Bearer sk-bogus', 'Authorization', `Bearer ${KEY}`]],
        ['the valid Authorization twice', ['Authorization', `Bearer ${KEY}`, 'Authorization', `Bearer ${KEY}`]],
        ['two x-api-key headers, the first valid', ['x-api-key', KEY, 'x-api-key', 'sk-bogus']],
      ]) {
        const r = await get(headers);
        assert.equal(r.status, 401, what);
        checkOpenAIErrorBody(r.json, /more than one|different credentials/);
      }
      const m = await raw(srv, jsonPost('/v1/messages', MSG, { 'x-api-key': KEY, authorization: 'Bearer sk-bogus' }));
      assert.equal(m.status, 401);
      checkAnthropicErrorBody(m.json, 'authentication_error', /different credentials/);
    });
  });

  test('PINHOLE_API_KEY is the key when no flag is given; a flag wins over it', async () => {
    await withServer({ vision: false, env: { PINHOLE_API_KEY: KEY } }, async (srv) => {
      assert.match(srv.stderr, /API key is required \(from PINHOLE_API_KEY\)/);
      assert.ok(!readFileSync(`/proc/${srv.proc.pid}/cmdline`, 'utf8').includes(KEY));
      await onlyKeyWorks(srv, KEY);
    });
    await withServer({ vision: false, extra: ['--api-key', 'sk-from-the-flag'], env: { PINHOLE_API_KEY: KEY } }, async (srv) => {
      assert.equal((await raw(srv, { path: '/metrics', headers: { 'x-api-key': KEY } })).status, 401);
      assert.equal((await raw(srv, { path: '/metrics', headers: { 'x-api-key': 'sk-from-the-flag' } })).status, 200);
    });
    const r = await serveFails([], { PINHOLE_API_KEY: '' });
    assert.equal(r.code, 2);
    assert.match(r.stderr, /PINHOLE_API_KEY.*empty/);
  });

  test('an unauthorised POST with a large body gets its 401 before the body is sent, and the connection closes', async () => {
    await withServer({ vision: false, extra: ['--api-key', KEY] }, async (srv) => {
      const size = 8 << 20;
      // 64 KiB every 20 ms: the whole body would take over 2.5 s
      const r = await new Promise((resolve, reject) => {
        let res = null;
        let sent = 0;
        const req = http.request(`${srv.url}/v1/chat/completions`, {
          method: 'POST', agent: false,
          headers: { 'content-type': 'application/json', 'content-length': size, authorization: 'Bearer sk-wrong' },
        });
        req.on('response', (resp) => {
          res = resp;
          const sentAtAnswer = sent;
          let text = '';
          resp.setEncoding('utf8');
          resp.on('data', (d) => { text += d; });
          resp.on('end', () => { req.destroy(); resolve({ status: resp.statusCode, headers: resp.headers, text, sentAtAnswer }); });
        });
        req.on('error', (e) => { if (!res) reject(new Error(`no answer before the connection failed: ${e.message}`)); });
        const chunk = Buffer.alloc(64 * 1024, 0x20);
        const next = () => {
          if (res || req.destroyed) return;
          if (sent >= size) { req.end(); return; }
          sent += chunk.length;
          req.write(chunk, () => setTimeout(next, 20));
        };
        next();
      });
      assert.equal(r.status, 401);
      checkOpenAIErrorBody(JSON.parse(r.text));
      assert.equal(r.headers.connection, 'close');
      assert.ok(r.sentAtAnswer < size / 4, `the 401 came after ${r.sentAtAnswer} of ${size} bytes`);
      // the server goes on
      assert.equal((await raw(srv, { path: '/metrics', headers: { 'x-api-key': KEY } })).status, 200);
    });
  });
});
