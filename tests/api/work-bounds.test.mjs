// Work bounded before it starts (issue 23, item 12). A prompt whose bytes
// alone prove that it cannot fit the context is refused on the HTTP thread
// before it is tokenized or queued (N bytes of text are at least N / L
// tokens, L the vocabulary's longest token in bytes). A client that opens
// a stream and reads nothing of it does not keep the model generating: once
// its kernel has acknowledged nothing more for --send-timeout-s while the
// answer waits, its connection is closed, the stream cancelled, and the
// next request runs.
import assert from 'node:assert/strict';
import net from 'node:net';
import { after, before, describe, test } from 'node:test';

import { metric, metrics, post, sleep, startServer, stopServer, waitMetrics } from './helpers.mjs';

describe('a prompt too long by its bytes alone', { timeout: 120_000 }, () => {
  let srv;
  before(async () => { srv = await startServer({ vision: false, extra: ['-c', '4096'] }); });
  after(() => stopServer(srv));

  test('an 8 MB text is refused at once, before it is tokenized or queued', async () => {
    const queued0 = metric(await metrics(srv), 'pinhole_requests_queued_total');
    const content = 'the river runs to the sea. '.repeat(300_000);
    const t0 = Date.now();
    const r = await post(srv, '/v1/chat/completions', { messages: [{ role: 'user', content }], max_tokens: 3 },
      { 'x-request-id': 'eight-megabytes' });
    const ms = Date.now() - t0;
    assert.equal(r.status, 400, r.text);
    assert.match(r.json.error.message,
      /^the prompt is at least \d+ tokens long \(its messages' 8099999 bytes of text, at most \d+ bytes a token\) but the context holds 4096/);
    // (8100000 bytes but the trailing space, which a chat format may trim)
    assert.ok(ms < 5000, `answered after ${ms} ms`);
    // nothing reached the worker: the queue never saw it, no turn was logged
    assert.equal(metric(await metrics(srv), 'pinhole_requests_queued_total'), queued0, 'not queued');
    assert.doesNotMatch(srv.stderr, /id=eight-megabytes: chat_completions/);
    // a prompt that fits is served as ever
    const ok = await post(srv, '/v1/chat/completions', { messages: [{ role: 'user', content: 'Say hi.' }], max_tokens: 2 });
    assert.equal(ok.status, 200);
  });

});

describe('--send-timeout-s', { timeout: 120_000 }, () => {
  let srv;
  before(async () => { srv = await startServer({ vision: false, extra: ['-c', '4096', '--send-timeout-s', '2'] }); });
  after(() => stopServer(srv));

  test('a stream whose client reads nothing is cancelled after --send-timeout-s; the next request runs', async () => {
    const m0 = await metrics(srv);
    // 2 KB of SSE a token (20 logprobs each), the end of turn banned: without
    // the timeout it would generate 3000 tokens (about 45 s here)
    const body = JSON.stringify({
      messages: [{ role: 'user', content: 'Tell me a long story.' }], max_tokens: 3000, stream: true,
      logprobs: true, top_logprobs: 20, logit_bias: { 151643: -100, 151645: -100 },
    });
    const sock = net.connect(srv.port, '127.0.0.1');
    sock.on('error', () => {});
    sock.pause(); // reads nothing (beyond what node buffers at first)
    sock.write('POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n' +
      `X-Request-Id: never-reads\r\nContent-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`);
    try {
      const t0 = Date.now();
      while (!/id=never-reads\n/.test(srv.stderr) && Date.now() - t0 < 5000) await sleep(20);
      await sleep(300); // it is running
      const next = await post(srv, '/v1/chat/completions', { messages: [{ role: 'user', content: 'Say hi.' }], max_tokens: 2 });
      const waited = Date.now() - t0;
      assert.equal(next.status, 200);
      assert.ok(waited < 15_000, `the next request waited ${waited} ms`);
      // (with several slots the next request ran beside it, before the timeout)
      const m = await waitMetrics(srv, (s) => metric(s, 'pinhole_requests_cancelled_total')
        - metric(m0, 'pinhole_requests_cancelled_total') >= 1, 15_000);
      assert.equal(metric(m, 'pinhole_connections_send_timeout_closed_total')
        - metric(m0, 'pinhole_connections_send_timeout_closed_total'), 1);
      assert.equal(metric(m, 'pinhole_requests_cancelled_total') - metric(m0, 'pinhole_requests_cancelled_total'), 1);
      const turn = /id=never-reads: chat_completions cancelled: .*generated (\d+)/.exec(srv.stderr);
      assert.ok(turn && Number(turn[1]) < 3000, `the turn was cut short: ${turn?.[0]}`);
      const end = /end POST \/v1\/chat\/completions from 127\.0\.0\.1 id=never-reads 200 in \d+ ms: (.*)/;
      const t1 = Date.now();
      while (!end.test(srv.stderr) && Date.now() - t1 < 5000) await sleep(20);
      assert.match(end.exec(srv.stderr)?.[1] ?? srv.stderr,
        /^cancelled: the client read nothing of its answer for 2 s \(--send-timeout-s\); prompt/);
    } finally {
      sock.destroy();
    }
  });

  test('--send-timeout-s takes a number of seconds', async () => {
    const bad = await startServer({ vision: false, extra: ['--send-timeout-s', 'soon'] }).catch((e) => e);
    assert.ok(bad instanceof Error, 'a server started with --send-timeout-s soon');
    assert.match(bad.message, /--send-timeout-s/);
  });
});
