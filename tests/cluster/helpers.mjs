// Shared by the cluster tests: deploy/local-cluster.sh driven from node
// (its state folder and ports chosen here), HAProxy's admin socket, the
// replicas' /metrics and the processes of a state folder.
//
// Environment: as the API tests (PINHOLE_BIN, PINHOLE_TEST_BIN,
// PH_ORACLE_DIR; ctest sets them); haproxy and redis-server on PATH (or
// HAPROXY_BIN, REDIS_SERVER_BIN), else the tests skip.
import { execFile, spawnSync } from 'node:child_process';
import { once } from 'node:events';
import { existsSync, mkdtempSync, readFileSync, readdirSync } from 'node:fs';
import http from 'node:http';
import { createConnection, createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

const HERE = fileURLToPath(new URL('.', import.meta.url));
export const REPO = join(HERE, '..', '..');
export const SCRIPT = join(REPO, 'deploy', 'local-cluster.sh');

/** Why the cluster tests cannot run here (a program missing), or null. */
export function missingPrograms() {
  const progs = [
    [process.env.HAPROXY_BIN || 'haproxy', ['-v'], 'haproxy'],
    [process.env.REDIS_SERVER_BIN || 'redis-server', ['--version'], 'redis-server'],
  ];
  const missing = progs.filter(([bin, args]) => spawnSync(bin, args, { stdio: 'ignore' }).error)
    .map(([bin, , pkg]) => `${bin} (package ${pkg})`);
  return missing.length ? `not installed: ${missing.join(', ')}` : null;
}

function portFree(port) {
  return new Promise((resolve) => {
    const srv = createServer();
    srv.once('error', () => resolve(false));
    srv.listen({ host: '127.0.0.1', port, exclusive: true }, () => srv.close(() => resolve(true)));
  });
}

/** n consecutive free loopback ports: the first of them. */
export async function freePortRange(n) {
  for (let tries = 0; tries < 200; tries++) {
    const base = 20000 + Math.floor(Math.random() * 40000);
    let ok = true;
    for (let p = base; p < base + n && ok; p++) ok = await portFree(p);
    if (ok) return base;
  }
  throw new Error(`no ${n} consecutive free ports found`);
}

/** Runs deploy/local-cluster.sh ARGS: {code, stdout, stderr}; never throws. */
export function runScript(args, env, timeoutMs = 90_000) {
  return new Promise((resolve) => {
    execFile('bash', [SCRIPT, ...args], { env, timeout: timeoutMs, maxBuffer: 16 << 20 },
      (err, stdout, stderr) => {
        const code = err ? (typeof err.code === 'number' ? err.code : err.signal ?? -1) : 0;
        resolve({ code, stdout, stderr });
      });
  });
}

/**
 * A cluster of `replicas` pinhole replicas behind HAProxy, with Redis, all
 * through deploy/local-cluster.sh, in a state folder of its own on free
 * ports. Call up(), then down() (always).
 */
export function makeCluster({ replicas, bin, model, mmproj, parallel = 2, threads = 1, checkInter = '200ms' }) {
  const state = mkdtempSync(join(tmpdir(), 'ph-cluster-'));
  const c = {
    state, replicas,
    env: null, lbPort: 0, basePort: 0, redisPort: 0,
    get lbUrl() { return `http://127.0.0.1:${c.lbPort}`; },
    get socket() { return join(state, 'haproxy.sock'); },
    replicaPort(name) { return c.basePort + Number(name.slice(1)) - 1; },
    names() { return Array.from({ length: replicas }, (_, i) => `r${i + 1}`); },

    async up() {
      // one range: HAProxy, the replicas, Redis
      const base = await freePortRange(replicas + 2);
      c.lbPort = base; c.basePort = base + 1; c.redisPort = base + 1 + replicas;
      c.env = {
        ...process.env,
        PINHOLE_BIN: bin,
        PINHOLE_CLUSTER_DIR: state,
        PINHOLE_CLUSTER_PORT: String(c.lbPort),
        PINHOLE_CLUSTER_BASE_PORT: String(c.basePort),
        PINHOLE_CLUSTER_REDIS_PORT: String(c.redisPort),
        PINHOLE_CLUSTER_MODEL: model,
        PINHOLE_CLUSTER_MMPROJ: mmproj,
        PINHOLE_CLUSTER_PARALLEL: String(parallel),
        PINHOLE_CLUSTER_THREADS: String(threads),
        PINHOLE_CLUSTER_REDIS_MAXMEMORY: '64mb',
        PINHOLE_CLUSTER_WAIT_S: '60',
        PINHOLE_CLUSTER_STOP_S: '10',
        PINHOLE_LB_CHECK_INTER: checkInter,
        XDG_CACHE_HOME: join(state, 'xdg-cache'), // the replicas' file-id memo
      };
      delete c.env.PINHOLE_API_KEY;
      const r = await runScript(['up', String(replicas)], c.env);
      if (r.code !== 0) throw new Error(`local-cluster.sh up ${replicas} failed (${r.code}):\n${r.stderr}${c.logs()}`);
      return r;
    },
    script(args) { return runScript(args, c.env); },
    down() { return c.env ? runScript(['down'], c.env) : Promise.resolve({ code: 0, stdout: '', stderr: '' }); },

    /** The pid files' processes: {name: pid}. */
    pids() {
      const out = {};
      const read = (name, f) => {
        if (existsSync(f)) out[name] = Number(readFileSync(f, 'utf8').trim().split(/\s+/)[0]);
      };
      read('redis', join(state, 'redis', 'pid'));
      for (const n of c.names()) read(n, join(state, `replica-${n.slice(1)}`, 'pid'));
      read('haproxy', join(state, 'haproxy.pid'));
      return out;
    },
    /** The ends of the parts' logs, for a failure's message. */
    logs() {
      const files = [join(state, 'haproxy.log'), join(state, 'redis', 'redis.log')];
      if (existsSync(state)) {
        for (const d of readdirSync(state)) if (d.startsWith('replica-')) files.push(join(state, d, 'pinhole.log'));
      }
      return files.filter((f) => existsSync(f))
        .map((f) => `\n--- ${f}\n${readFileSync(f, 'utf8').split('\n').slice(-15).join('\n')}`).join('');
    },
  };
  return c;
}

/** Whether pid is a live process (a zombie, ended but not yet reaped, is not). */
export function alive(pid) {
  let stat;
  try { stat = readFileSync(`/proc/${pid}/stat`, 'utf8'); } catch { return false; }
  const st = stat.slice(stat.lastIndexOf(')') + 2, stat.lastIndexOf(')') + 3);
  return st !== 'Z' && st !== 'X';
}

/** Sends one command to HAProxy's admin socket; its answer. */
export function admin(socket, command) {
  return new Promise((resolve, reject) => {
    const conn = createConnection(socket);
    let out = '';
    conn.setEncoding('utf8');
    conn.on('connect', () => conn.write(`${command}\n`));
    conn.on('data', (d) => { out += d; });
    conn.on('end', () => resolve(out));
    conn.on('error', reject);
  });
}

/** HAProxy's view of backend `pinhole`: {r1: 'UP', r2: 'DOWN' | 'DRAIN' | 'MAINT' ...}. */
export async function serverStates(socket) {
  const csv = await admin(socket, 'show stat');
  const lines = csv.split('\n');
  const head = lines[0].replace(/^# /, '').split(',');
  const [px, sv, st] = ['pxname', 'svname', 'status'].map((k) => head.indexOf(k));
  const out = {};
  for (const l of lines.slice(1)) {
    const f = l.split(',');
    if (f[px] === 'pinhole' && f[sv] !== 'BACKEND' && f[sv] !== 'FRONTEND') out[f[sv]] = f[st];
  }
  return out;
}

/**
 * The requests a replica has answered, from its /metrics: the sum of
 * pinhole_requests_total over every endpoint but health and metrics (which
 * HAProxy's checks and these reads make).
 */
export async function answered(port) {
  const res = await fetch(`http://127.0.0.1:${port}/metrics`);
  if (res.status !== 200) throw new Error(`GET /metrics on ${port}: ${res.status}`);
  const text = await res.text();
  let n = 0;
  for (const m of text.matchAll(/^pinhole_requests_total\{endpoint="([^"]*)"[^}]*\} (\d+)$/gm)) {
    if (m[1] !== 'health' && m[1] !== 'metrics') n += Number(m[2]);
  }
  return n;
}

/** Whether something accepts TCP connections on 127.0.0.1:port. */
export function listening(port) {
  return new Promise((resolve) => {
    const conn = createConnection({ host: '127.0.0.1', port });
    conn.once('connect', () => { conn.destroy(); resolve(true); });
    conn.once('error', () => resolve(false));
  });
}

/**
 * A fetch for the API clients (their `fetch` option) that sends every
 * request over one kept-alive connection, one after the other: HAProxy then
 * has ended a request before it sees the next, so that its bounded load
 * (hash-balance-factor) never counts the previous one as still running
 * (which a pool of connections, answered by HAProxy's threads in parallel,
 * can). Bodies are read whole (no streams). close() closes the connection.
 */
export function oneConnectionFetch() {
  const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
  const f = async (input, init = {}) => {
    const url = new URL(typeof input === 'string' || input instanceof URL ? input : input.url);
    const headers = Object.fromEntries(new Headers(init.headers ?? input.headers ?? {}));
    let body = init.body ?? null;
    if (body !== null && typeof body !== 'string' && !(body instanceof Uint8Array)) {
      body = Buffer.from(await new Response(body).arrayBuffer());
    }
    return new Promise((resolve, reject) => {
      const req = http.request(url, { method: init.method ?? 'GET', headers, agent, signal: init.signal }, (res) => {
        const chunks = [];
        res.on('data', (c) => chunks.push(c));
        res.on('error', reject);
        res.on('end', () => {
          const h = new Headers();
          for (const [k, v] of Object.entries(res.headers)) for (const x of [v].flat()) h.append(k, x);
          const empty = res.statusCode === 204 || res.statusCode === 304;
          resolve(new Response(empty ? null : Buffer.concat(chunks), { status: res.statusCode, headers: h }));
        });
      });
      req.on('error', reject);
      req.end(body ?? undefined);
    });
  };
  f.close = () => agent.destroy();
  return f;
}

/**
 * A chat completion sent to port through a connection of its own, its body
 * held back after its first `first` bytes (pad the body with blanks to make
 * it longer than HAProxy's buffer: HAProxy then passes the request on to a
 * replica, which waits for the rest). finish() sends the rest and resolves
 * with {status, headers (lower-case names), body}; abort() drops it.
 */
export async function heldRequest(port, { headers = {}, body, first }) {
  const sock = createConnection({ host: '127.0.0.1', port });
  await once(sock, 'connect');
  const bytes = Buffer.from(body);
  const head = [
    'POST /v1/chat/completions HTTP/1.1', `Host: 127.0.0.1:${port}`, 'Content-Type: application/json',
    `Content-Length: ${bytes.length}`, 'Connection: close',
    ...Object.entries(headers).map(([k, v]) => `${k}: ${v}`),
  ].join('\r\n') + '\r\n\r\n';
  let answer = '';
  sock.setEncoding('utf8');
  sock.on('data', (d) => { answer += d; });
  const closed = new Promise((resolve) => sock.on('close', resolve));
  sock.on('error', () => {});
  sock.write(head);
  sock.write(bytes.subarray(0, first));
  return {
    async finish() {
      sock.write(bytes.subarray(first)); // not end(): a half-closed client is one that left (option abortonclose)
      await closed;
      const [top, ...rest] = answer.split('\r\n\r\n');
      const [status, ...lines] = top.split('\r\n');
      return {
        status: Number(status.split(' ')[1]),
        headers: Object.fromEntries(lines.map((l) => [l.slice(0, l.indexOf(':')).toLowerCase(), l.slice(l.indexOf(':') + 1).trim()])),
        body: rest.join('\r\n\r\n'),
      };
    },
    abort() { sock.destroy(); },
  };
}

/** HAProxy's count of the requests a replica runs now (show stat's scur). */
export async function running(socket, name) {
  const csv = await admin(socket, 'show stat');
  const lines = csv.split('\n');
  const head = lines[0].replace(/^# /, '').split(',');
  const [px, sv, cur] = ['pxname', 'svname', 'scur'].map((k) => head.indexOf(k));
  const line = lines.find((l) => { const f = l.split(','); return f[px] === 'pinhole' && f[sv] === name; });
  return line ? Number(line.split(',')[cur]) : NaN;
}

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/** Polls fn until it returns a truthy value, or throws after ms. */
export async function until(what, fn, ms = 15_000) {
  const end = Date.now() + ms;
  for (;;) {
    const v = await fn();
    if (v) return v;
    if (Date.now() > end) throw new Error(`${what}: not within ${ms / 1000} s`);
    await sleep(100);
  }
}
