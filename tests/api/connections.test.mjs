// Slow and greedy clients (issue 13, item 2) and per-request deadlines
// (item 3): connections that trickle their request in, or that are opened
// by the hundred, cannot lock other clients out; the server's threads stay
// a fixed pool; and a request that runs past --request-timeout-s is stopped
// with an answer that says so.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import net from 'node:net';
import { after, before, describe, test } from 'node:test';

import { metric, metrics, MODEL_ID, sleep, startServer, stopServer, waitMetrics } from './helpers.mjs';

// A connection that sends `head`, then one more byte every `every` ms and
// never finishes its request. Resolves its state when connected.
function trickle(port, { head = 'POST /v1/chat/completions HTTP/1.1\r\nHost: localhost\r\n', every = 500, from } = {}) {
  return new Promise((resolve) => {
    const st = { closed: false, openedAt: Date.now(), closedAt: 0 };
    const sock = net.connect({ port, host: '127.0.0.1', ...(from ? { localAddress: from } : {}) });
    st.sock = sock;
    sock.on('error', () => {});
    sock.on('close', () => { st.closed = true; st.closedAt = Date.now(); clearInterval(st.timer); resolve(st); });
    sock.on('connect', () => {
      st.openedAt = Date.now();
      sock.write(head);
      st.timer = setInterval(() => { if (!sock.destroyed) sock.write('x'); }, every);
      resolve(st);
    });
  });
}

const threads = (srv) => Number(/^Threads:\s+(\d+)/m.exec(readFileSync(`/proc/${srv.proc.pid}/status`, 'utf8'))[1]);

async function timed(fn) {
  const t0 = performance.now();
  const v = await fn();
  return { v, ms: performance.now() - t0 };
}

function chat(srv, { stream = false, max_tokens = 4, content = 'Say hi.', signal } = {}) {
  return fetch(`${srv.url}/v1/chat/completions`, {
    method: 'POST', signal, headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: MODEL_ID, messages: [{ role: 'user', content }], max_tokens, temperature: 0, stream }),
  });
}

describe('slow clients', { timeout: 300_000 }, () => {
  let srv;
  const conns = [];
  before(async () => {
    srv = await startServer({
      vision: false,
      extra: ['--max-connections', '64', '--max-connections-per-ip', '48', '--header-timeout-s', '3', '--body-timeout-s', '3'],
    });
  });
  after(async () => {
    for (const c of conns) c.sock.destroy();
    await stopServer(srv);
  });

  test('300 trickling connections: /health and a real request still answer within a second, on a fixed pool of threads', async () => {
    await chat(srv).then((r) => r.json()); // warm: the first answer's one-off costs
    const alone = await timed(() => chat(srv).then((r) => r.json()));
    const before = threads(srv);
    for (let i = 0; i < 300; i++) conns.push(trickle(srv.port));
    const opened = await Promise.all(conns);
    conns.length = 0;
    conns.push(...opened);
    await sleep(300);
    const health = await timed(() => fetch(`${srv.url}/health`).then((r) => r.status));
    assert.equal(health.v, 200);
    assert.ok(health.ms < 1000, `/health took ${health.ms.toFixed(0)} ms`);
    const real = await timed(() => chat(srv).then(async (r) => ({ status: r.status, body: await r.json() })));
    assert.equal(real.v.status, 200, JSON.stringify(real.v.body));
    assert.ok(real.ms < alone.ms + 1000, `a real request took ${real.ms.toFixed(0)} ms (${alone.ms.toFixed(0)} ms alone)`);
    const open = opened.filter((c) => !c.closed).length;
    assert.ok(open <= 48, `${open} trickling connections still open past --max-connections-per-ip 48`);
    assert.ok(threads(srv) <= before + 1, `threads: ${before} before, ${threads(srv)} with 300 connections`);
    const s = await metrics(srv);
    assert.ok(metric(s, 'pinhole_connections_limit_closed_total') >= 300 - 48,
              `limit_closed ${metric(s, 'pinhole_connections_limit_closed_total')}`);
    // and the rest are cut at the head's deadline, however steadily they trickle
    const t0 = Date.now();
    while (opened.some((c) => !c.closed) && Date.now() - t0 < 10_000) await sleep(100);
    assert.equal(opened.filter((c) => !c.closed).length, 0, 'every trickling connection was closed');
    assert.ok(metric(await metrics(srv), 'pinhole_connections_deadline_closed_total') >= 1);
  });

  test('a head or a body that trickles in is cut at its deadline; an idle kept-alive connection too', async () => {
    const s0 = await metrics(srv);
    const head = await trickle(srv.port, { every: 200 });
    const body = await trickle(srv.port, {
      head: 'POST /v1/chat/completions HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{',
      every: 200,
    });
    const idle = await new Promise((resolve) => {
      const st = { closed: false };
      const sock = net.connect({ port: srv.port, host: '127.0.0.1' }, () => {
        sock.write('GET /health HTTP/1.1\r\nHost: localhost\r\n\r\n');
      });
      sock.on('data', () => { st.answeredAt = Date.now(); resolve(st); });
      sock.on('error', () => {});
      sock.on('close', () => { st.closed = true; st.closedAt = Date.now(); });
      st.sock = sock;
    });
    conns.push(head, body, idle);
    await waitMetrics(srv, () => head.closed && body.closed && idle.closed, 15_000, 100);
    for (const [name, c, from] of [['head', head, head.openedAt], ['body', body, body.openedAt], ['idle', idle, idle.answeredAt]]) {
      assert.ok(c.closed, `the ${name} connection is still open`);
      const after = (c.closedAt - from) / 1000;
      assert.ok(after >= 2.8 && after < 8, `the ${name} connection was closed ${after.toFixed(1)} s after it started (deadline 3 s)`);
    }
    assert.ok(metric(await metrics(srv), 'pinhole_connections_deadline_closed_total')
              - metric(s0, 'pinhole_connections_deadline_closed_total') >= 3);
  });

  test('one address past --max-connections-per-ip loses its oldest idle connections, not the others\' requests', async () => {
    const s0 = await metrics(srv);
    const other = [];
    for (let i = 0; i < 60; i++) other.push(await trickle(srv.port, { from: '127.0.0.2', every: 10_000 }));
    conns.push(...other);
    await sleep(300);
    const open = other.filter((c) => !c.closed).length;
    assert.ok(open <= 48, `${open} connections of 127.0.0.2 open past the limit of 48`);
    const survivors = other.filter((c) => !c.closed);
    const oldestOpen = Math.min(...survivors.map((c) => c.openedAt));
    const closed = other.filter((c) => c.closed);
    assert.ok(closed.length >= 12, `only ${closed.length} were closed`);
    assert.ok(closed.every((c) => c.openedAt <= oldestOpen + 50), 'the oldest connections were the ones closed');
    const r = await chat(srv);
    assert.equal(r.status, 200);
    await r.json();
    assert.ok(metric(await metrics(srv), 'pinhole_connections_limit_closed_total')
              - metric(s0, 'pinhole_connections_limit_closed_total') >= 12);
    for (const c of other) c.sock.destroy();
  });

  test('a request line that is not HTTP gets 400, whatever it is; an unknown method 405', async () => {
    const raw = (text) => new Promise((resolve) => {
      let got = '';
      const sock = net.connect({ port: srv.port, host: '127.0.0.1' }, () => sock.write(text));
      sock.setEncoding('utf8');
      sock.on('data', (d) => { got += d; if (got.includes('\r\n\r\n')) sock.destroy(); });
      sock.on('error', () => {});
      sock.on('close', () => resolve(got));
    });
    assert.match(await raw('G@T /health HTTP/1.1\r\nHost: localhost\r\n\r\n'), /^HTTP\/1\.1 400 /);
    for (const garbage of ['GARBAGE\r\n\r\n', '\x00\x01\x02\r\n\r\n', 'GET\r\n\r\n', ' /health HTTP/1.1\r\n\r\n']) {
      const got = await raw(garbage);
      assert.match(got, /^HTTP\/1\.1 400 [^]*"the request line is not HTTP/, `${JSON.stringify(garbage)}: ${JSON.stringify(got.slice(0, 80))}`);
    }
    // empty lines before the request line are allowed (RFC 9112, 2.2)
    assert.match(await raw('\r\n\r\nGET /health HTTP/1.1\r\nHost: localhost\r\n\r\n'), /^HTTP\/1\.1 200 /);
    assert.match(await raw('PUT /health HTTP/1.1\r\nHost: localhost\r\nContent-Length: 0\r\n\r\n'), /^HTTP\/1\.1 405 [^]*Allow: GET, POST, OPTIONS/i);
  });
});

describe('--request-timeout-s', { timeout: 300_000 }, () => {
  let srv;
  before(async () => { srv = await startServer({ vision: false, extra: ['-c', '4096', '--request-timeout-s', '1.5'] }); });
  after(() => stopServer(srv));

  test('a request still running at its deadline is stopped: 503 that names the flag, or an error event', async () => {
    const s0 = await metrics(srv);
    const long = 'Write a very long essay about rivers.';
    const plain = await timed(() => chat(srv, { max_tokens: 100000, content: long }).then(async (r) => ({ status: r.status, body: await r.json() })));
    assert.equal(plain.v.status, 503, JSON.stringify(plain.v.body));
    assert.match(plain.v.body.error.message, /--request-timeout-s/);
    assert.ok(plain.ms < 6000, `stopped after ${plain.ms.toFixed(0)} ms`);
    const r = await chat(srv, { stream: true, max_tokens: 100000, content: long });
    assert.equal(r.status, 200);
    const text = await r.text();
    assert.match(text, /"error"[^]*--request-timeout-s/, 'the stream ends with an error event');
    assert.match(text, /data: \[DONE\]\s*$/);
    // a short request is untouched
    const ok = await chat(srv);
    assert.equal(ok.status, 200);
    await ok.json();
    assert.equal(metric(await metrics(srv), 'pinhole_requests_timed_out_total')
                 - metric(s0, 'pinhole_requests_timed_out_total'), 2);
  });

  test('a request queued behind a long one is stopped at its deadline too', async () => {
    const ac = new AbortController();
    const busy = await chat(srv, { stream: true, max_tokens: 100000, content: 'Write a very long essay about rivers.', signal: ac.signal });
    // long too: whether it is dropped from the queue or cut once it runs, it ends at its deadline
    const queued = await timed(() => chat(srv, { max_tokens: 100000, content: 'Write a very long essay about lakes.' })
      .then(async (r) => ({ status: r.status, body: await r.json() })));
    ac.abort();
    await busy.text().catch(() => {});
    assert.equal(queued.v.status, 503, JSON.stringify(queued.v.body));
    assert.match(queued.v.body.error.message, /did not (start|finish) within 1\.5 s \(--request-timeout-s\)/);
    assert.ok(queued.ms < 5000, `answered after ${queued.ms.toFixed(0)} ms`);
  });
});
