// HTTP framing (issue 13, item 8): a request whose body length two parties
// could read differently (differing Content-Length headers, or
// Content-Length with Transfer-Encoding: the request-smuggling patterns) is
// refused with a 400 before its body is read; a plain request on the same
// kind of raw connection is served.
import assert from 'node:assert/strict';
import net from 'node:net';
import { after, before, describe, test } from 'node:test';

import { MODEL_ID, startServer, stopServer } from './helpers.mjs';

// Sends raw bytes and returns what the server answered until it closed or
// 10 s passed.
function raw(srv, bytes) {
  return new Promise((resolve, reject) => {
    const sock = net.connect(srv.port, '127.0.0.1');
    let got = '';
    const timer = setTimeout(() => { sock.destroy(); resolve(got); }, 10_000);
    sock.on('data', (d) => { got += d.toString('latin1'); });
    sock.on('close', () => { clearTimeout(timer); resolve(got); });
    sock.on('error', (e) => { clearTimeout(timer); if (got) resolve(got); else reject(e); });
    sock.write(bytes);
  });
}

const body = JSON.stringify({ model: MODEL_ID, messages: [{ role: 'user', content: 'Hi' }], max_tokens: 2 });
const head = (extra) => 'POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n' +
  `Connection: close\r\n${extra}\r\n`;

describe('HTTP framing', { timeout: 120_000 }, () => {
  let srv;
  before(async () => { srv = await startServer({ vision: false }); });
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
});
