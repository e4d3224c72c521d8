// The disk tier through the server (DESIGN 7): a picture conversation
// survives a restart (SIGTERM, or kill -9 after its checkpoint was written)
// and resumes from its block records: nothing encoded, only the new rows
// evaluated, the same answer as a cold server (--no-cache). A damaged
// record is refused, dropped and counted, and the turn runs cold with the
// right answer.
import assert from 'node:assert/strict';
import { mkdtempSync, readdirSync, rmSync, statSync, openSync, readSync, writeSync, closeSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';

import { metric, QWEN3VL, startServer, stopServer, turnVsCold, waitMetrics } from './helpers.mjs';
import { checkpointFiles as files, oraclePic, resumes, resumesAfterSigterm, text, twoTurns } from './reuse-cases.mjs';

const M = QWEN3VL; // reuse-qwen35.test.mjs runs the restart on the Qwen3.5 pair

describe('disk tier through the server', { timeout: 600_000 }, () => {
  let cold;
  const dirs = [];
  const tmp = () => { const d = mkdtempSync(join(tmpdir(), 'ph-kv-')); dirs.push(d); return d; };
  before(async () => { cold = await startServer({ extra: ['--no-cache'] }); });
  after(async () => {
    await stopServer(cold);
    for (const d of dirs) rmSync(d, { recursive: true, force: true });
  });

  test('a picture chat resumes from disk after SIGTERM', () => resumesAfterSigterm(M, tmp(), cold));

  test('the cache folders pinhole creates are 0700 and every file in them 0600', async () => {
    const dir = tmp();
    const kv = join(dir, 'a', 'kv'), img = join(dir, 'b', 'img');
    const old = process.umask(0o022); // the usual umask: pinhole must not rely on a stricter one
    let srv;
    try {
      srv = await startServer({ extra: ['--kv-disk-dir', kv, '--image-cache-dir', img] });
    } finally {
      process.umask(old);
    }
    try {
      const msgs = [{ role: 'user', content: [text('Here is my photo:'), oraclePic('grad.png'), text('What is in this picture?')] }];
      await turnVsCold(srv, cold, msgs, 'one turn');
    } finally {
      await stopServer(srv);
    }
    const seen = [];
    const walk = (d) => {
      for (const name of readdirSync(d)) {
        const p = join(d, name);
        const st = statSync(p);
        seen.push(p);
        if (st.isDirectory()) {
          assert.equal(st.mode & 0o777, 0o700, `${p}: a folder pinhole made is 0700`);
          walk(p);
        } else {
          assert.equal(st.mode & 0o077, 0, `${p}: mode ${(st.mode & 0o777).toString(8)}, no group or other bits`);
        }
      }
    };
    walk(dir);
    assert.ok(files(kv).length >= 1, 'a segment file was written');
    assert.ok(readdirSync(img).some((f) => f.endsWith('.embd')), 'an embedding file was written');
    assert.ok(readdirSync(join(kv, 'blocks')).includes('index.sqlite'), 'the index');
    assert.ok(seen.length >= 8, seen.join(' ')); // a, a/kv, a/kv/blocks, its segment, its index, b, b/img, its file
  });

  test('a picture chat resumes from disk after kill -9', async () => {
    const dir = tmp();
    const { srv, msgs, t2 } = await twoTurns(M, dir, cold);
    // the end-of-turn checkpoint is written in the background: wait for it
    await waitMetrics(srv, (s) => metric(s, 'pinhole_disk_cache_writes_queued') === 0);
    const r = await srv.stop('SIGKILL');
    assert.equal(r.signal, 'SIGKILL');
    await resumes(M, dir, cold, msgs, t2, 'turn 3 after kill -9');
  });

  test('a damaged record is refused and the turn runs cold', async () => {
    const dir = tmp();
    const { srv, msgs } = await twoTurns(M, dir, cold);
    await stopServer(srv);
    for (const f of files(dir)) { // flip a byte of the KV of every segment's first record (the conversation's first block)
      const path = join(dir, f), fd = openSync(path, 'r+'), at = 2000;
      assert.ok(statSync(path).size > at);
      const b = Buffer.alloc(1);
      readSync(fd, b, 0, 1, at);
      b[0] ^= 0x10;
      writeSync(fd, b, 0, 1, at);
      closeSync(fd);
    }
    const again = await startServer({ extra: ['--kv-disk-dir', dir] });
    try {
      const t3 = await turnVsCold(again, cold, msgs, 'turn 3 over a damaged record');
      assert.equal(t3.cached, 0, 'nothing restored');
      assert.ok(t3.d.disk_rejected >= 1, 'the record was counted as rejected');
      assert.match(again.stderr, /is bad \(checksum mismatch\): dropped/);
    } finally {
      await stopServer(again);
    }
  });
});
