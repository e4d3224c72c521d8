// `pinhole pull OWNER/NAME[:QUANT]` against a local hub: a node:http server
// with the Hugging Face hub's URL layout (the tree listing with LFS
// SHA-256s, /resolve/main/FILE answering 302 to a storage path with
// X-Linked-Etag and X-Linked-Size, Range requests there) serving the
// oracle's tiny pair under mksynth/tiny-GGUF. Then `pinhole serve` and
// `pinhole run` with -m mksynth/tiny-GGUF:F16 use the pulled files. No
// network: everything is on 127.0.0.1.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import http from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, test } from 'node:test';

import { BIN, MMPROJ, MODEL, openai, picture, withServer } from './helpers.mjs';

const REPO = 'mksynth/tiny-GGUF';
const sha256 = (b) => createHash('sha256').update(b).digest('hex');
const llm = readFileSync(MODEL), mmproj = readFileSync(MMPROJ);
// The repository: three quantizations of one model (copies of the same
// bytes; BF16 is there so that F16 must match as a whole word), its
// mmproj, and a small file that is not in LFS.
const FILES = {
  'tiny-F16.gguf': llm,
  'tiny-BF16.gguf': llm,
  'tiny-Q8_0.gguf': llm,
  'mmproj-tiny-F16.gguf': mmproj,
  'README.md': Buffer.from('# tiny\n'),
};
// A second repository: its Q4_K_M comes in two parts, and its two mmproj
// files are neither F16 (small stand-ins: pull does not read them).
const SPLIT = 'mksynth/split-GGUF';
const stand = (s) => Buffer.from(`GGUF stand-in ${s}\n`);
const SPLIT_FILES = {
  'split-Q4_K_M-00001-of-00002.gguf': stand(1),
  'split-Q4_K_M-00002-of-00002.gguf': stand(2),
  'split-Q8_0.gguf': stand(3),
  'mmproj-split-Q8_0.gguf': stand(4),
  'mmproj-split-BF16.gguf': stand(5),
};
const REPOS = { [REPO]: FILES, [SPLIT]: SPLIT_FILES };
const ALL = { ...FILES, ...SPLIT_FILES };

// ---- the hub --------------------------------------------------------------

const hub = {
  server: null, url: '',
  log: [],             // {path, range, auth} of every request
  sent: {},            // body bytes sent per file name
  cutOnce: new Set(),  // files whose next transfer breaks half way
  ignoreRange: false,  // answer Range requests with the whole file (200)
  badSha: new Set(),   // files listed with a wrong SHA-256
  token: null,         // when set, downloads need Authorization: Bearer TOKEN
  gone: null,          // a listed file that /resolve/main/ answers 404 for
  reset() {
    this.log = []; this.sent = {}; this.cutOnce.clear(); this.ignoreRange = false; this.badSha.clear();
    this.token = null; this.gone = null;
  },
  fetched(name) { return this.log.filter((r) => r.path.startsWith('/storage/') && r.name === name); },
};

function listing(files) {
  return Object.entries(files).map(([path, b]) => {
    const lfs = path.endsWith('.gguf');
    const sha = hub.badSha.has(path) ? sha256(Buffer.from('something else')) : sha256(b);
    return {
      type: 'file', path, size: b.length, oid: createHash('sha1').update(b).digest('hex'),
      ...(lfs ? { lfs: { oid: sha, size: b.length, pointerSize: 134 } } : {}),
    };
  }).concat([{ type: 'directory', path: 'old', oid: '0'.repeat(40), size: 0 }]);
}

function json(res, status, body) {
  res.writeHead(status, { 'Content-Type': 'application/json' });
  res.end(JSON.stringify(body));
}

function serveStorage(req, res, name) {
  const b = ALL[name];
  const m = /^bytes=(\d+)-$/.exec(req.headers.range ?? '');
  const from = m && !hub.ignoreRange ? Number(m[1]) : 0;
  if (from >= b.length && from > 0) {
    res.writeHead(416, { 'Content-Range': `bytes */${b.length}` });
    return res.end();
  }
  const body = b.subarray(from);
  const headers = { 'Content-Length': body.length, 'Accept-Ranges': 'bytes', ETag: `"${sha256(b)}"` };
  if (from) headers['Content-Range'] = `bytes ${from}-${b.length - 1}/${b.length}`;
  res.writeHead(from ? 206 : 200, headers);
  if (hub.cutOnce.delete(name)) {
    const half = body.subarray(0, body.length >> 1);
    hub.sent[name] = (hub.sent[name] ?? 0) + half.length;
    res.write(half, () => res.socket.destroy());
    return;
  }
  hub.sent[name] = (hub.sent[name] ?? 0) + body.length;
  res.end(body);
}

function handle(req, res) {
  const url = new URL(req.url, 'http://hub');
  const path = decodeURIComponent(url.pathname);
  const entry = { path, range: req.headers.range ?? null, auth: req.headers.authorization ?? null, name: null };
  hub.log.push(entry);
  let m;
  if ((m = /^\/api\/models\/([^/]+\/[^/]+)\/tree\/main$/.exec(path))) {
    if (!REPOS[m[1]]) return json(res, 404, { error: 'Repository not found' });
    return json(res, 200, listing(REPOS[m[1]]));
  }
  if ((m = /^\/([^/]+\/[^/]+)\/resolve\/main\/(.+)$/.exec(path))) {
    if (hub.token && req.headers.authorization !== `Bearer ${hub.token}`) {
      return json(res, 401, { error: 'Access to model mksynth/tiny-GGUF is restricted.' });
    }
    if (!REPOS[m[1]]) return json(res, 404, { error: 'Repository not found' });
    const b = REPOS[m[1]][m[2]];
    if (!b || m[2] === hub.gone) return json(res, 404, { error: 'Entry not found' });
    res.writeHead(302, {
      Location: `/storage/${sha256(b)}?name=${encodeURIComponent(m[2])}`,
      ETag: `"${createHash('sha1').update(b).digest('hex')}"`,
      'X-Linked-Etag': `"${sha256(b)}"`, 'X-Linked-Size': String(b.length),
    });
    return res.end();
  }
  // Storage is addressed by content (the copies share it); the name in the
  // query keeps the count of bytes per file.
  const name = url.searchParams.get('name');
  if ((m = /^\/storage\/([0-9a-f]{64})$/.exec(path)) && ALL[name] && sha256(ALL[name]) === m[1]) {
    entry.name = name;
    return serveStorage(req, res, name);
  }
  return json(res, 404, { error: 'Not found' });
}

before(async () => {
  hub.server = http.createServer(handle);
  await new Promise((r) => hub.server.listen(0, '127.0.0.1', r));
  hub.url = `http://127.0.0.1:${hub.server.address().port}`;
});
after(() => new Promise((r) => hub.server.close(r)));

// ---- running pinhole --------------------------------------------------------

const homes = [];
after(() => { for (const h of homes) rmSync(h, { recursive: true, force: true }); });
function freshCache() {
  const h = mkdtempSync(join(tmpdir(), 'pinhole-pull-'));
  homes.push(h);
  return h;
}
const repoDir = (cache) => join(cache, 'pinhole', 'models', 'mksynth', 'tiny-GGUF');

/** Runs pinhole ARGS with XDG_CACHE_HOME=cache against the local hub: {code, stdout, stderr}. */
function pinhole(args, cache, env = {}) {
  const base = { ...process.env };
  delete base.HF_TOKEN;
  const p = spawn(BIN, args, {
    env: { ...base, XDG_CACHE_HOME: cache, PINHOLE_HUB_URL: hub.url, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stdout = '', stderr = '';
  p.stdout.on('data', (d) => { stdout += d; });
  p.stderr.on('data', (d) => { stderr += d; });
  return new Promise((resolve) => p.on('close', (code) => resolve({ code, stdout, stderr })));
}

function assertPulled(cache, name, bytes, r) {
  const f = join(repoDir(cache), name);
  assert.ok(existsSync(f), `${f} is there; stderr:\n${r.stderr}`);
  assert.ok(readFileSync(f).equals(bytes), `${name} is the hub's file byte for byte`);
  assert.ok(!existsSync(`${f}.part`), `no ${name}.part is left`);
}

// The cache of the first test, pulled once: later tests reuse it.
let pulled = null;

test('pull fetches the model of the quantization asked for and its mmproj, byte for byte', async () => {
  hub.reset();
  const cache = freshCache();
  const r = await pinhole(['pull', `${REPO}:F16`], cache);
  assert.equal(r.code, 0, r.stderr);
  assertPulled(cache, 'tiny-F16.gguf', llm, r);
  assertPulled(cache, 'mmproj-tiny-F16.gguf', mmproj, r);
  assert.deepEqual(readdirSync(repoDir(cache)).filter((n) => !n.startsWith('.')).sort(),
    ['mmproj-tiny-F16.gguf', 'tiny-F16.gguf'], 'F16 is not BF16: only the pair was fetched');
  assert.equal(statSync(repoDir(cache)).mode & 0o777, 0o700, 'the cache folder is the user\'s own');
  assert.equal(r.stdout, `${join(repoDir(cache), 'tiny-F16.gguf')}\n${join(repoDir(cache), 'mmproj-tiny-F16.gguf')}\n`,
    'stdout names the two files');
  assert.match(r.stderr, /SHA-256 checked/);
  assert.match(r.stderr, /pinhole serve -m mksynth\/tiny-GGUF:F16/);
  const resolves = hub.log.filter((e) => e.path.includes('/resolve/main/')).map((e) => e.path);
  assert.deepEqual(resolves.sort(), [`/${REPO}/resolve/main/mmproj-tiny-F16.gguf`, `/${REPO}/resolve/main/tiny-F16.gguf`]);
  assert.equal(hub.sent['tiny-F16.gguf'], llm.length, 'the model was sent once');
  pulled = cache;
});

test('a second pull of the same files downloads nothing', async () => {
  assert.ok(pulled, 'the first pull ran');
  hub.reset();
  const r = await pinhole(['pull', `${REPO}:f16`], pulled);
  assert.equal(r.code, 0, r.stderr);
  assert.deepEqual(hub.log.filter((e) => !e.path.startsWith('/api/')), [], 'only the file list was asked for');
  assert.match(r.stderr, /tiny-F16\.gguf: up to date/);
  assert.match(r.stderr, /mmproj-tiny-F16\.gguf: up to date/);
  assertPulled(pulled, 'tiny-F16.gguf', llm, r);
});

test('a transfer cut half way is resumed with a Range request', async () => {
  hub.reset();
  hub.cutOnce.add('tiny-Q8_0.gguf');
  const cache = freshCache();
  const r = await pinhole(['pull', `${REPO}:q8_0`], cache);
  assert.equal(r.code, 0, r.stderr);
  assertPulled(cache, 'tiny-Q8_0.gguf', llm, r);
  const tries = hub.fetched('tiny-Q8_0.gguf');
  assert.equal(tries.length, 2, 'one cut transfer, one resumed');
  assert.equal(tries[0].range, null);
  const m = /^bytes=(\d+)-$/.exec(tries[1].range ?? '');
  assert.ok(m && Number(m[1]) > 0, `the second transfer asks for the rest (Range: ${tries[1].range})`);
  assert.ok(hub.sent['tiny-Q8_0.gguf'] < 2 * llm.length, `bytes sent ${hub.sent['tiny-Q8_0.gguf']} < 2 x ${llm.length}`);
  assert.match(r.stderr, /resuming/);
});

test('a .part left by an earlier pull is resumed; a hub that ignores the Range starts it over', async () => {
  const third = Math.floor(llm.length / 3);
  hub.reset();
  let cache = freshCache();
  mkdirSync(repoDir(cache), { recursive: true });
  writeFileSync(join(repoDir(cache), 'tiny-Q8_0.gguf.part'), llm.subarray(0, third));
  let r = await pinhole(['pull', `${REPO}:Q8_0`], cache);
  assert.equal(r.code, 0, r.stderr);
  assertPulled(cache, 'tiny-Q8_0.gguf', llm, r);
  assert.deepEqual(hub.fetched('tiny-Q8_0.gguf').map((e) => e.range), [`bytes=${third}-`]);
  assert.equal(hub.sent['tiny-Q8_0.gguf'], llm.length - third, 'only the rest was sent');

  hub.reset();
  hub.ignoreRange = true;
  cache = freshCache();
  mkdirSync(repoDir(cache), { recursive: true });
  writeFileSync(join(repoDir(cache), 'tiny-Q8_0.gguf.part'), Buffer.alloc(third, 0x55)); // wrong bytes
  r = await pinhole(['pull', `${REPO}:Q8_0`], cache);
  assert.equal(r.code, 0, r.stderr);
  assertPulled(cache, 'tiny-Q8_0.gguf', llm, r);
  assert.match(r.stderr, /whole file/);
});

test('a download whose SHA-256 is not the listed one is refused and its .part removed', async () => {
  hub.reset();
  hub.badSha.add('tiny-F16.gguf');
  const cache = freshCache();
  const r = await pinhole(['pull', `${REPO}:F16`], cache);
  assert.equal(r.code, 1, r.stderr);
  assert.match(r.stderr, /tiny-F16\.gguf: checksum mismatch/);
  assert.ok(!existsSync(join(repoDir(cache), 'tiny-F16.gguf')), 'no model file');
  assert.ok(!existsSync(join(repoDir(cache), 'tiny-F16.gguf.part')), 'no .part');
  assert.ok(!existsSync(join(repoDir(cache), 'mmproj-tiny-F16.gguf')), 'the pull stopped at the first failure');
});

test('a repository or a file the hub does not have: 404 says which', async () => {
  hub.reset();
  const cache = freshCache();
  let r = await pinhole(['pull', 'mksynth/nothing-GGUF'], cache);
  assert.equal(r.code, 1, r.stderr);
  assert.match(r.stderr, /mksynth\/nothing-GGUF not found on http:\/\/127\.0\.0\.1:\d+ \(HTTP 404\)/);
  assert.ok(!existsSync(join(cache, 'pinhole')), 'no folder was made');
  hub.gone = 'mmproj-tiny-F16.gguf';
  r = await pinhole(['pull', `${REPO}:F16`], cache);
  assert.equal(r.code, 1, r.stderr);
  assert.match(r.stderr, /mmproj-tiny-F16\.gguf of mksynth\/tiny-GGUF not found on .* \(HTTP 404\)/);
  assert.deepEqual(readdirSync(repoDir(cache)).filter((n) => n.includes('mmproj')), [], 'no file, no empty .part');
});

test('no single model for the quantization: refused with the choices, nothing fetched', async () => {
  hub.reset();
  const cache = freshCache();
  for (const ref of [REPO, `${REPO}:Q4_K_M`]) {
    const r = await pinhole(['pull', ref], cache);
    assert.equal(r.code, 2, r.stderr);
    for (const q of ['F16', 'BF16', 'Q8_0']) {
      assert.match(r.stderr, new RegExp(`pinhole pull mksynth/tiny-GGUF:${q} +\\(tiny-${q}\\.gguf, 43\\.0 MiB\\)`));
    }
  }
  assert.equal(hub.log.filter((e) => !e.path.startsWith('/api/')).length, 0, 'only file lists were asked for');
  const bad = await pinhole(['pull', 'not a repo'], cache);
  assert.equal(bad.code, 2);
  assert.match(bad.stderr, /not a model reference/);
});

test('a split model is refused; no single mmproj: the choices listed, --mmproj-quant picks one', async () => {
  hub.reset();
  const cache = freshCache();
  let r = await pinhole(['pull', SPLIT], cache);
  assert.equal(r.code, 2, r.stderr);
  assert.match(r.stderr, /comes split in 2 files \(split-Q4_K_M-00001-of-00002\.gguf, \.\.\.\).*gguf-split --merge/);
  r = await pinhole(['pull', `${SPLIT}:Q8_0`], cache);
  assert.equal(r.code, 2, r.stderr);
  assert.match(r.stderr, /pinhole pull mksynth\/split-GGUF --mmproj-quant Q8_0 +\(mmproj-split-Q8_0\.gguf/);
  assert.match(r.stderr, /pinhole pull mksynth\/split-GGUF --mmproj-quant BF16 +\(mmproj-split-BF16\.gguf/);
  assert.equal(hub.log.filter((e) => !e.path.startsWith('/api/')).length, 0, 'nothing was fetched');
  r = await pinhole(['pull', `${SPLIT}:Q8_0`, '--mmproj-quant', 'bf16'], cache);
  assert.equal(r.code, 0, r.stderr);
  const dir = join(cache, 'pinhole', 'models', 'mksynth', 'split-GGUF');
  assert.deepEqual(readdirSync(dir).filter((n) => !n.startsWith('.')).sort(), ['mmproj-split-BF16.gguf', 'split-Q8_0.gguf']);
  assert.ok(readFileSync(join(dir, 'split-Q8_0.gguf')).equals(SPLIT_FILES['split-Q8_0.gguf']));
});

test('a gated repository: 401 names HF_TOKEN; the token is sent and never printed', async () => {
  hub.reset();
  hub.token = 'hf_secret_test_token';
  const cache = freshCache();
  let r = await pinhole(['pull', `${REPO}:F16`], cache);
  assert.equal(r.code, 1, r.stderr);
  assert.match(r.stderr, /HTTP 401.*gated or private.*HF_TOKEN/s);
  r = await pinhole(['pull', `${REPO}:F16`, '--hub-url', `${hub.url}/`], cache, { HF_TOKEN: hub.token });
  assert.equal(r.code, 0, r.stderr);
  assertPulled(cache, 'tiny-F16.gguf', llm, r);
  assert.ok(hub.log.some((e) => e.auth === `Bearer ${hub.token}`), 'the token went to the hub');
  assert.ok(!(r.stdout + r.stderr).includes(hub.token), 'the token is not printed');
});

test('serve and run -m OWNER/NAME:QUANT use the pulled files without the network', async () => {
  assert.ok(pulled, 'the first pull ran');
  hub.reset();
  await withServer({ model: `${REPO}:F16`, vision: null, env: { XDG_CACHE_HOME: pulled } }, async (srv) => {
    assert.match(srv.stderr, /pictures on/, 'the pulled mmproj was loaded');
    const c = await openai(srv).chat.completions.create({
      max_tokens: 2, temperature: 0,
      messages: [{ role: 'user', content: [{ type: 'text', text: 'What is this?' },
        { type: 'image_url', image_url: { url: picture('small.png').url } }] }],
    });
    assert.equal(c.object, 'chat.completion');
    assert.equal(c.model, 'tiny-GGUF:F16', 'served as NAME:QUANT');
    assert.ok(c.usage.prompt_tokens > 8, 'the picture took its tokens');
  });
  const ran = await pinhole(['run', '-m', `${REPO}:F16`, '--raw', 'Hello', '-n', '2', '-t', '2'], pulled);
  const ref = await pinhole(['run', '-m', MODEL, '--raw', 'Hello', '-n', '2', '-t', '2'], pulled);
  assert.equal(ran.code, 0, ran.stderr);
  assert.equal(ran.stdout, ref.stdout, 'the same model as the oracle file');
  assert.deepEqual(hub.log, [], 'no request to the hub');

  const missing = await pinhole(['serve', '-m', `${REPO}:Q8_0`, '--port', '0'], pulled);
  assert.equal(missing.code, 2);
  assert.match(missing.stderr, /fetch it with: pinhole pull mksynth\/tiny-GGUF:Q8_0\).*-m mksynth\/tiny-GGUF:F16/s);
});
