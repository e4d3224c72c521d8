// A Redis server of the test's own on loopback, a small client of the Redis
// protocol (binary values in and out: the tests read and damage what pinhole
// stored), and a proxy that delays Redis's replies.
import { spawn, spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import net from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

export const HAVE_REDIS = spawnSync('redis-server', ['--version']).status === 0;

export async function freePort() {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.listen(0, '127.0.0.1', () => { const { port } = s.address(); s.close(() => resolve(port)); });
    s.on('error', reject);
  });
}

/** A RESP reply parser over a growing buffer: the reply and where it ends, or null. */
function parse(buf, at = 0) {
  const eol = buf.indexOf('\r\n', at);
  if (eol < 0) return null;
  const type = String.fromCharCode(buf[at]), line = buf.toString('utf8', at + 1, eol);
  if (type === '+') return { v: line, end: eol + 2 };
  if (type === '-') return { v: new Error(line), end: eol + 2 };
  if (type === ':') return { v: Number(line), end: eol + 2 };
  if (type === '$') {
    const n = Number(line);
    if (n < 0) return { v: null, end: eol + 2 };
    if (buf.length < eol + 2 + n + 2) return null;
    return { v: buf.subarray(eol + 2, eol + 2 + n), end: eol + 2 + n + 2 };
  }
  if (type === '*') {
    const n = Number(line), v = [];
    let end = eol + 2;
    for (let i = 0; i < n; i++) {
      const r = parse(buf, end);
      if (!r) return null;
      v.push(r.v);
      end = r.end;
    }
    return { v, end };
  }
  throw new Error(`redis: unexpected reply type ${type}`);
}

/** One connection: cmd('SET', key, buffer) resolves with the reply (an Error for an error reply). */
export async function client(port) {
  const sock = net.connect(port, '127.0.0.1');
  await new Promise((resolve, reject) => { sock.once('connect', resolve); sock.once('error', reject); });
  let buf = Buffer.alloc(0);
  const waiting = [];
  sock.on('data', (d) => {
    buf = Buffer.concat([buf, d]);
    for (let r; waiting.length && (r = parse(buf));) {
      buf = buf.subarray(r.end);
      waiting.shift()(r.v);
    }
  });
  return {
    cmd(...args) {
      const parts = [Buffer.from(`*${args.length}\r\n`)];
      for (const a of args) {
        const b = Buffer.isBuffer(a) ? a : Buffer.from(String(a));
        parts.push(Buffer.from(`$${b.length}\r\n`), b, Buffer.from('\r\n'));
      }
      sock.write(Buffer.concat(parts));
      return new Promise((resolve) => waiting.push(resolve));
    },
    close() { sock.destroy(); },
  };
}

/** Starts redis-server on a free port (no persistence, LRU within maxmemory); stop() ends it. */
export async function startRedis({ port = null, args = [] } = {}) {
  port ??= await freePort();
  const dir = mkdtempSync(join(tmpdir(), 'pinhole-redis-'));
  const proc = spawn('redis-server', ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no',
    '--dir', dir, '--maxmemory', '512mb', '--maxmemory-policy', 'allkeys-lru', ...args], { stdio: 'ignore' });
  for (let i = 0; ; i++) {
    let why;
    try {
      const c = await client(port);
      const pong = await c.cmd('PING');
      c.close();
      // it answers (without its password: NOAUTH)
      if (pong === 'PONG' || /NOAUTH/.test(pong?.message)) break;
      why = String(pong);
    } catch (e) {
      why = e.message;
    }
    if (i > 100) { proc.kill('SIGKILL'); throw new Error(`redis-server did not start on ${port}: ${why}`); }
    await new Promise((r) => setTimeout(r, 50));
  }
  return {
    port, url: `redis://127.0.0.1:${port}`, proc,
    async stop() {
      if (proc.exitCode === null && proc.signalCode === null) {
        const gone = new Promise((r) => proc.once('exit', r));
        proc.kill('SIGKILL');
        await gone;
      }
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** A TCP proxy to port that holds each reply delayMs before passing it on. */
export async function delayingProxy(port, delayMs) {
  const socks = new Set();
  const server = net.createServer((c) => {
    const up = net.connect(port, '127.0.0.1');
    socks.add(c); socks.add(up);
    c.on('data', (d) => up.write(d));
    up.on('data', (d) => setTimeout(() => { if (!c.destroyed) c.write(d); }, delayMs));
    const end = () => { c.destroy(); up.destroy(); };
    c.on('error', end); up.on('error', end); c.on('close', end); up.on('close', end);
  });
  await new Promise((r) => server.listen(0, '127.0.0.1', r));
  return {
    port: server.address().port,
    close() { for (const s of socks) s.destroy(); return new Promise((r) => server.close(r)); },
  };
}
