// The state cache through the server (DESIGN 4-6, 8): clients re-send the
// whole conversation every turn; the server must encode each picture once,
// evaluate only what is new, never attach one picture's state to another,
// and answer exactly as a cold server (--no-cache) does. The cases of
// reuse-cases.mjs on the Qwen3-VL pair (reuse-qwen35.test.mjs runs them on
// the Qwen3.5 one), and the embedding cache's bounds.
import assert from 'node:assert/strict';
import { mkdtempSync, readdirSync, readFileSync, rmSync, truncateSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, test } from 'node:test';

import {
  counters, diff, metric, metrics, MODEL_ID, openai, QWEN3VL, sleep, startServer, stopServer,
} from './helpers.mjs';
import { auxiliaryCases, gen, N, pic, reuseCases, text, url } from './reuse-cases.mjs';

reuseCases(QWEN3VL);

describe('embedding cache bounds and the elastic encoder', { timeout: 600_000 }, () => {
  test('eviction by count', async () => {
    // the RAM tier is off: a checkpoint of the first chat would serve the third
    const srv = await startServer({ extra: ['--image-cache-entries', '1', '--cache-ram-mib', '0'] });
    try {
      const before = await counters(srv);
      for (const u of [gen(5), gen(6), gen(5)])
        await openai(srv).chat.completions.create({ model: MODEL_ID, max_tokens: 1, messages: [{ role: 'user', content: [pic(u), text('New chat.')] }] });
      const d = diff(before, await counters(srv));
      assert.equal(d.encoded, 3, 'the evicted picture is encoded again');
      assert.equal(d.evictions, 2);
    } finally { await stopServer(srv); }
  });

  test('eviction by bytes', async () => {
    // a 64x64 picture's rows take 32 KiB with this model: 1 MiB holds ~30
    const srv = await startServer({ extra: ['--image-cache-mib', '1'] });
    try {
      const before = await counters(srv);
      for (let s = 10; s < 50; s++)
        await openai(srv).chat.completions.create({ model: MODEL_ID, max_tokens: 1, messages: [{ role: 'user', content: [pic(gen(s)), text('Hi.')] }] });
      const d = diff(before, await counters(srv));
      const held = metric(await metrics(srv), 'pinhole_image_cache_bytes');
      assert.ok(held <= 1 << 20, `${held} bytes held`);
      assert.ok(d.evictions >= 1 && d.encoded === 40, `evictions ${d.evictions}`);
    } finally { await stopServer(srv); }
  });

  test('the embedding files stay within --image-cache-disk-mib', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'pinhole-embd-'));
    const srv = await startServer({ extra: ['--image-cache-dir', dir, '--image-cache-disk-mib', '1'] });
    try {
      for (let s = 60; s < 100; s++)
        await openai(srv).chat.completions.create({ model: MODEL_ID, max_tokens: 1, messages: [{ role: 'user', content: [pic(gen(s)), text('Hi.')] }] });
      const m = await metrics(srv);
      const files = readdirSync(dir).filter((f) => f.endsWith('.embd'));
      const bytes = files.reduce((n, f) => n + readFileSync(join(dir, f)).length, 0);
      assert.ok(bytes <= 1 << 20 && files.length >= 10, `${files.length} files, ${bytes} bytes`);
      assert.equal(metric(m, 'pinhole_image_cache_disk_bytes'), bytes);
      assert.equal(metric(m, 'pinhole_image_cache_disk_evictions_total'), 40 - files.length);
    } finally { await stopServer(srv); rmSync(dir, { recursive: true, force: true }); }
  });

  test('--vision-idle-s 1: cached pictures do not load the encoder; a new one loads it once', async () => {
    const srv = await startServer({ extra: ['--vision-idle-s', '1'] });
    try {
      const ask1 = (content) => openai(srv).chat.completions.create({ model: MODEL_ID, max_tokens: 1, messages: [{ role: 'user', content }] });
      let m = await counters(srv);
      assert.equal(m.loads, 0, 'not loaded at start');
      await ask1([pic(gen(7)), text('One.')]);
      m = await counters(srv);
      assert.equal(m.loads, 1);
      for (let i = 0; i < 50 && (await counters(srv)).unloads < 1; i++) await sleep(100);
      m = await counters(srv);
      assert.equal(m.unloads, 1, 'released after 1 s idle');
      assert.equal(metric(await metrics(srv), 'pinhole_encoder_loaded'), 0);
      await ask1([text('Another chat with the same picture.'), pic(gen(7))]);
      m = await counters(srv);
      assert.equal(m.loads, 1, 'every picture cached: the encoder stays unloaded');
      await ask1([pic(gen(7)), pic(gen(8)), text('Compare.')]);
      m = await counters(srv);
      assert.equal(m.loads, 2, 'one new picture loads it once');
      assert.equal(m.encoded, 2);
    } finally { await stopServer(srv); }
  });

  test('the embedding cache on disk survives a restart; a damaged entry is refused', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'pinhole-embd-'));
    const msgs = [{ role: 'user', content: [pic(url('wide.png')), text('Describe.')] }];
    const once = async () => {
      const srv = await startServer({ extra: ['--image-cache-dir', dir] });
      try {
        const before = await counters(srv);
        const r = await openai(srv).chat.completions.create({ model: MODEL_ID, max_tokens: N, temperature: 0, messages: msgs });
        return { text: r.choices[0].message.content, d: diff(before, await counters(srv)) };
      } finally { await stopServer(srv); }
    };
    try {
      const a = await once();
      assert.equal(a.d.encoded, 1);
      const files = readdirSync(dir).filter((f) => f.endsWith('.embd'));
      assert.equal(files.length, 1);
      const b = await once();
      assert.equal(b.d.encoded, 0, 'after a restart the rows come from disk');
      assert.equal(b.text, a.text);
      const f = join(dir, files[0]);
      truncateSync(f, Math.floor(readFileSync(f).length / 2));
      const c = await once();
      assert.equal(c.d.encoded, 1, 'a truncated entry is not used');
      assert.equal(c.text, a.text);
      const bytes = readFileSync(f);
      bytes[bytes.length - 3] ^= 0x10;
      writeFileSync(f, bytes);
      const d = await once();
      assert.equal(d.d.encoded, 1, 'a corrupted entry is not used');
      assert.equal(d.text, a.text);
    } finally { rmSync(dir, { recursive: true, force: true }); }
  });
});

auxiliaryCases(QWEN3VL);
