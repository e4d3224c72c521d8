// HTTP framing (issue 13, item 8): a request whose body length two parties
// could read differently (differing Content-Length headers, or
// Content-Length with Transfer-Encoding: the request-smuggling patterns) is
// refused with a 400 before its body is read; a plain request on the same
// kind of raw connection is served. Issue 23, item 7: every malformed or
// unserved head is answered at once (within a second or two, never by a
// deadline's silence): an oversize Content-Length without Expect (413), a
// transfer coding other than chunked (501 or 400), two Host headers or none
// in HTTP/1.1, %00 in the path, an unknown expectation (417), folded or
// malformed header lines (400); an absolute-form target is served.
import assert from 'node:assert/strict';
import net from 'node:net';
import { after, before, describe, test } from 'node:test';

import { MODEL_ID, startServer, stopServer } from './helpers.mjs';

// Sends raw bytes and returns what the server answered until it closed or
// `ms` passed (default 10 s).
function raw(srv, bytes, ms = 10_000) {
  return new Promise((resolve, reject) => {
    const sock = net.connect(srv.port, '127.0.0.1');
    let got = '';
    const timer = setTimeout(() => { sock.destroy(); resolve(got); }, ms);
    sock.on('data', (d) => { got += d.toString('latin1'); });
    sock.on('close', () => { clearTimeout(timer); resolve(got); });
    sock.on('error', (e) => { clearTimeout(timer); if (got) resolve(got); else reject(e); });
    sock.write(bytes);
  });
}

// The answer to raw bytes, which must come (and the connection close)
// within 2 s: {status, text, ms}.
async function quick(srv, bytes) {
  const t0 = Date.now();
  const text = await raw(srv, bytes, 2000);
  const ms = Date.now() - t0;
  assert.ok(ms < 2000, `no answer within 2 s (got ${JSON.stringify(text.slice(0, 80))})`);
  const m = /^HTTP\/1\.[01] (\d{3}) /.exec(text);
  assert.ok(m, `not an HTTP answer: ${JSON.stringify(text.slice(0, 200))}`);
  return { status: Number(m[1]), text, ms };
}

const body = JSON.stringify({ model: MODEL_ID, messages: [{ role: 'user', content: 'Hi' }], max_tokens: 2 });
const head = (extra) => 'POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n' +
  `Connection: close\r\n${extra}\r\n`;

describe('HTTP framing', { timeout: 120_000 }, () => {
  let srv;
  before(async () => { srv = await startServer({ vision: false, extra: ['--max-body-mb', '1'] }); });
  after(() => stopServer(srv));

  test('a plain request on a raw connection is served', async () => {
    const r = await raw(srv, head(`Content-Length: ${body.length}\r\n`) + body);
    assert.match(r, /^HTTP\/1\.1 200/);
  });

  test('two differing Content-Length headers: 400', async () => {
    const r = await raw(srv, head(`Content-Length: ${body.length}\r\nContent-Length: ${body.length + 5}\r\n`) + body);
    assert.match(r, /^HTTP\/1\.1 400/);
    assert.match(r, /Content-Length headers that differ/);
  });

  test('Content-Length with Transfer-Encoding: 400', async () => {
    const chunked = `${body.length.toString(16)}\r\n${body}\r\n0\r\n\r\n`;
    const r = await raw(srv, head(`Content-Length: ${body.length}\r\nTransfer-Encoding: chunked\r\n`) + chunked);
    assert.match(r, /^HTTP\/1\.1 400/);
    assert.match(r, /Transfer-Encoding/);
  });

  test('a Content-Length over --max-body-mb without Expect: 413 at once, while the body is still coming', async () => {
    const big = 2 << 20;
    const r = await quick(srv, head(`Content-Length: ${big}\r\n`) + ' '.repeat(64 * 1024));
    assert.equal(r.status, 413);
    assert.match(r.text, /the request body is 2097152 bytes; at most 1 MiB/);
    // with Expect: 100-continue too (and no byte of the body)
    const e = await quick(srv, head(`Content-Length: ${big}\r\nExpect: 100-continue\r\n`));
    assert.equal(e.status, 413);
  });

  test('a transfer coding other than chunked alone: 501 or 400 at once', async () => {
    const chunked = `${body.length.toString(16)}\r\n${body}\r\n0\r\n\r\n`;
    for (const [te, status, why] of [
      ['gzip, chunked', 501, /transfer coding 'gzip' is not supported/],
      ['identity', 400, /does not end with chunked/],
      ['chunked, gzip', 400, /does not end with chunked/],
      ['chunked, chunked', 400, /chunked more than once/],
      ['', 400, /Transfer-Encoding is empty/],
    ]) {
      const r = await quick(srv, head(`Transfer-Encoding: ${te}\r\n`) + chunked);
      assert.equal(r.status, status, `Transfer-Encoding: ${te}`);
      assert.match(r.text, why);
    }
    // two headers: gzip then chunked is 'gzip, chunked'
    const two = await quick(srv, head('Transfer-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n') + chunked);
    assert.equal(two.status, 501);
    // chunked alone is read as ever
    const ok = await raw(srv, head('Transfer-Encoding: chunked\r\n') + chunked);
    assert.match(ok, /^HTTP\/1\.1 200/);
  });

  test('two Host headers, or none in HTTP/1.1: 400', async () => {
    const two = await quick(srv, 'GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nHost: evil.example\r\nConnection: close\r\n\r\n');
    assert.equal(two.status, 400);
    assert.match(two.text, /2 Host headers/);
    const none = await quick(srv, 'GET /health HTTP/1.1\r\nConnection: close\r\n\r\n');
    assert.equal(none.status, 400);
    assert.match(none.text, /must have a Host header/);
  });

  test('%00 in the path: 400 (it does not become the page at /)', async () => {
    for (const path of ['/%00health', '/%00', '/v1/models%00x']) {
      const r = await quick(srv, `GET ${path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n`);
      assert.equal(r.status, 400, path);
      assert.match(r.text, /%00/);
    }
    // an escaped percent sign is not a NUL
    const r = await quick(srv, 'GET /%2500 HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n');
    assert.equal(r.status, 404);
  });

  test('an absolute-form target is served; its host is checked as Host is', async () => {
    const r = await quick(srv, `GET http://127.0.0.1:${srv.port}/health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n`);
    assert.equal(r.status, 200);
    assert.match(r.text, /"status":"ok"/);
    const p = await quick(srv, `POST HTTP://localhost:${srv.port}/v1/chat/completions HTTP/1.1\r\nHost: localhost\r\n` +
      `Content-Type: application/json\r\nConnection: close\r\nContent-Length: ${body.length}\r\n\r\n${body}`);
    assert.equal(p.status, 200);
    assert.match(p.text, /"chat\.completion"/);
    const root = await quick(srv, `GET http://localhost:${srv.port} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n`);
    assert.equal(root.status, 200, 'no path: /');
    assert.match(root.text, /text\/html/);
    // the target's host stands for Host (RFC 9112, 3.2.2): a foreign one is refused
    const evil = await quick(srv, 'GET http://evil.example/health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n');
    assert.equal(evil.status, 403);
    const bad = await quick(srv, 'GET http://user@127.0.0.1/health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n');
    assert.equal(bad.status, 400);
  });

  test('Expect other than 100-continue: 417', async () => {
    const r = await quick(srv, head('Expect: 999-weird\r\n' + `Content-Length: ${body.length}\r\n`) + body);
    assert.equal(r.status, 417);
    assert.match(r.text, /999-weird/);
  });

  test('folded and malformed header lines: 400, on a new connection and on a kept-alive one', async () => {
    for (const bad of ['X-Note: a\r\n b\r\n', 'X-Note: a\r\n\tb\r\n', 'Host : 127.0.0.1\r\n', 'NoColon\r\n', 'X-A: a\0b\r\n']) {
      const r = await quick(srv, `GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n${bad}Connection: close\r\n\r\n`);
      assert.equal(r.status, 400, JSON.stringify(bad));
    }
    const fold = await quick(srv, 'GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Note: a\r\n b\r\n\r\n');
    assert.match(fold.text, /obs-fold/);
    // the second request of a kept-alive connection: the library joins a
    // folded line into a header name, which is then no token
    const r = await quick(srv, 'GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n' +
      'GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Note: a\r\n b c\r\nConnection: close\r\n\r\n');
    assert.match(r.text, /^HTTP\/1\.1 200 [^]*HTTP\/1\.1 400 /);
    assert.match(r.text, /is not a token/);
  });

  test('a head past 32 KiB: 431 at once', async () => {
    const r = await quick(srv, `GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: ${'a'.repeat(40 * 1024)}\r\n\r\n`);
    assert.equal(r.status, 431);
  });
});
