// The state cache through the server (DESIGN 4-6, 8): clients re-send the
// whole conversation every turn; the server must encode each picture once,
// evaluate only what is new, never attach one picture's state to another,
// and answer exactly as a cold server (--no-cache) does.
import assert from 'node:assert/strict';
import { mkdtempSync, readdirSync, readFileSync, rmSync, truncateSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import zlib from 'node:zlib';

import {
  anthropic, counters, diff, metric, metrics, MODEL_ID, openai, openaiError, picture, sleep, startServer, stopServer, turnVsCold as turn,
} from './helpers.mjs';

const N = 6;

// A w x h RGB PNG whose pixels depend on seed.
function png(w, h, seed) {
  const table = Array.from({ length: 256 }, (_, n) => {
    let c = n;
    for (let k = 0; k < 8; k++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1;
    return c >>> 0;
  });
  const crc = (buf) => {
    let c = 0xffffffff;
    for (const b of buf) c = table[(c ^ b) & 0xff] ^ (c >>> 8);
    return (c ^ 0xffffffff) >>> 0;
  };
  const chunk = (type, data) => {
    const td = Buffer.concat([Buffer.from(type, 'latin1'), data]);
    const len = Buffer.alloc(4); len.writeUInt32BE(data.length);
    const c = Buffer.alloc(4); c.writeUInt32BE(crc(td));
    return Buffer.concat([len, td, c]);
  };
  const raw = Buffer.alloc((w * 3 + 1) * h);
  for (let y = 0; y < h; y++)
    for (let x = 0; x < w; x++) {
      const o = y * (w * 3 + 1) + 1 + x * 3;
      raw[o] = (x * 3 + seed * 40) & 255; raw[o + 1] = (y * 5 + seed * 17) & 255; raw[o + 2] = ((x ^ y) + seed * 90) & 255;
    }
  const ihdr = Buffer.alloc(13);
  ihdr.writeUInt32BE(w, 0); ihdr.writeUInt32BE(h, 4); ihdr[8] = 8; ihdr[9] = 2;
  return Buffer.concat([Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]), chunk('IHDR', ihdr),
                        chunk('IDAT', zlib.deflateSync(raw)), chunk('IEND', Buffer.alloc(0))]);
}

const url = (name) => picture(name).url;
const gen = (seed) => `data:image/png;base64,${png(64, 64, seed).toString('base64')}`;
const pic = (u) => ({ type: 'image_url', image_url: { url: u } });
const text = (t) => ({ type: 'text', text: t });

describe('reuse through the server', { timeout: 600_000 }, () => {
  let warm, cold;
  before(async () => {
    [warm, cold] = await Promise.all([startServer(), startServer({ extra: ['--no-cache'] })]);
  });
  after(async () => { await Promise.all([stopServer(warm), stopServer(cold)]); });

  test('a picture re-sent on every turn of a 4-turn chat is encoded once', async () => {
    const msgs = [{ role: 'user', content: [pic(url('gray.png')), text('What is in this picture?')] }];
    let prev = await turn(warm, cold, msgs, 'turn 1');
    assert.equal(prev.d.encoded, 1);
    for (let t = 2; t <= 4; t++) {
      msgs.push({ role: 'assistant', content: 'It is a picture.' }, { role: 'user', content: `Question ${t}?` });
      const r = await turn(warm, cold, msgs, `turn ${t}`);
      assert.equal(r.d.encoded, 0, `turn ${t} encodes nothing`);
      assert.ok(r.cached >= prev.prompt, `turn ${t} reuses the previous prompt (${r.cached} of ${prev.prompt})`);
      assert.equal(r.d.reused, r.cached, 'metrics and usage agree');
      prev = r;
    }
  });

  test('an edited earlier message reuses only the prefix before the edit', async () => {
    const conv = (q) => [
      { role: 'system', content: 'You describe pictures.' },
      { role: 'user', content: [text(q), pic(url('grad.png'))] },
      { role: 'assistant', content: 'An answer.' }, { role: 'user', content: 'Second question.' },
    ];
    const first = await turn(warm, cold, conv('First question about cats.'), 'before the edit');
    const r = await turn(warm, cold, conv('Edited question about dogs.'), 'after the edit');
    // what comes before the edit: the system turn and "<|im_start|>user\n"
    const sys = await turn(warm, cold, [{ role: 'system', content: 'You describe pictures.' },
                                        { role: 'user', content: 'x' }], 'the prefix alone');
    assert.ok(r.cached > 0 && r.cached < first.prompt, `edited: reused ${r.cached} of ${first.prompt}`);
    assert.ok(r.cached <= sys.prompt - 4, `edited: reused ${r.cached}, the prefix before the edit is shorter`);
    assert.equal(r.d.encoded, 0, 'the picture after the edit comes from the embedding cache');
    assert.equal(r.d.hits, 1);
  });

  test('a different picture of the same size in the same place is encoded, its rows not reused', async () => {
    const conv = (u) => [{ role: 'user', content: [text('Look:'), pic(u), text('What is it?')] }];
    const a = await turn(warm, cold, conv(gen(1)), 'picture 1');
    const b = await turn(warm, cold, conv(gen(2)), 'picture 2, same size');
    assert.equal(b.d.encoded, 1);
    assert.ok(b.cached < a.prompt - 10, `only the text before the picture is reused (${b.cached} of ${a.prompt})`);
  });

  test('a new picture appended after the history reuses the whole history', async () => {
    const msgs = [{ role: 'user', content: [pic(url('small.png')), text('Describe.')] }];
    const first = await turn(warm, cold, msgs, 'first');
    msgs.push({ role: 'assistant', content: 'Fine.' }, { role: 'user', content: [text('And this one?'), pic(gen(3))] });
    const r = await turn(warm, cold, msgs, 'appended');
    assert.ok(r.cached >= first.prompt, `reused ${r.cached}, history ${first.prompt}`);
    assert.equal(r.d.encoded, 1);
  });

  test('two conversations interleaved (A1 B1 A2 B2) resume from RAM checkpoints', async () => {
    const conv = (u, k) => {
      const m = [{ role: 'user', content: [pic(u), text('What is in this picture?')] }];
      if (k > 1) m.push({ role: 'assistant', content: 'A picture.' }, { role: 'user', content: 'And its colours?' });
      return m;
    };
    const [ua, ub] = [gen(20), gen(21)];
    const a1 = await turn(warm, cold, conv(ua, 1), 'A1');
    const b1 = await turn(warm, cold, conv(ub, 1), 'B1');
    assert.equal(b1.d.ram_saves, 1, 'B1 displaces A: A is saved');
    assert.equal(b1.d.encoded, 1);
    const a2 = await turn(warm, cold, conv(ua, 2), 'A2');
    assert.equal(a2.d.ram_hits, 1);
    assert.ok(a2.d.ram >= a1.prompt && a2.cached === a2.d.ram, `A2 restores A1 (${a2.d.ram} rows of ${a1.prompt})`);
    assert.equal(a2.d.encoded + a2.d.hits, 0, 'A2 needs its picture neither encoded nor from the embedding cache');
    const b2 = await turn(warm, cold, conv(ub, 2), 'B2');
    assert.ok(b2.d.ram >= b1.prompt && b2.cached === b2.d.ram, `B2 restores B1 (${b2.d.ram} rows of ${b1.prompt})`);
    assert.equal(b2.d.encoded + b2.d.hits, 0);
  });

  test('a RAM checkpoint is never used for another picture', async () => {
    const conv = (u) => [{ role: 'user', content: [text('Look here:'), pic(u), text('What is it?')] }];
    const x = await turn(warm, cold, conv(gen(22)), 'picture 22');
    await turn(warm, cold, [{ role: 'user', content: 'Something else entirely.' }], 'a text chat in between');
    const y = await turn(warm, cold, conv(gen(23)), 'picture 23, same size and place');
    assert.equal(y.d.encoded, 1);
    assert.ok(y.cached < x.prompt - 10, `only the text before the picture is reused (${y.cached} of ${x.prompt})`);
  });

  test('the same picture twice in one message is encoded once', async () => {
    const u = gen(4);
    const r = await turn(warm, cold, [{ role: 'user', content: [pic(u), text('and'), pic(u), text('Same?')] }], 'twice');
    assert.equal(r.d.encoded, 1);
    assert.equal(r.d.misses, 1, 'looked up once');
  });
});

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

describe('auxiliary requests (an agent\'s side calls)', { timeout: 600_000 }, () => {
  test('side calls park the main conversation; the next main turn resumes it', async () => {
    // the RAM tier is off: only the parked slot can bring the conversation back
    // --any-model on purpose: this server is asked for model 'x' (a client that hard-codes a name)
    const srv = await startServer({ extra: ['--cache-ram-mib', '0', '--any-model'] });
    try {
      const PARK = { parked: 'pinhole_conversations_parked_total', restored: 'pinhole_conversations_restored_total',
                     dropped: 'pinhole_conversations_dropped_total', encoded: 'pinhole_images_encoded_total' };
      const count = async () => {
        const m = await metrics(srv);
        return Object.fromEntries(Object.entries(PARK).map(([k, n]) => [k, metric(m, n)]));
      };
      const main = [{ role: 'user', content: [pic(gen(30)), text('What is in this picture?')] }];
      const first = await openai(srv).chat.completions.create({ model: 'x', max_tokens: N, temperature: 0, messages: main });
      // a title request through the header, a tool check through the body flag (Anthropic), a picture summary
      await openai(srv).chat.completions.create({ model: 'x', max_tokens: 4, messages: [
        { role: 'system', content: 'You write titles.' }, { role: 'user', content: 'Title this chat.' }] },
        { headers: { 'X-Pinhole-Auxiliary': '1' } });
      await anthropic(srv).messages.create({ model: 'x', max_tokens: 4, auxiliary: true,
        messages: [{ role: 'user', content: 'Is `ls -la` safe to run?' }] });
      await openai(srv).chat.completions.create({ model: 'x', max_tokens: 4, auxiliary: true, messages: [
        { role: 'user', content: [text('Summarize:'), pic(gen(31))] }] });
      let c = await count();
      assert.equal(c.parked, 1, 'parked once, by the first side call');
      main.push({ role: 'assistant', content: first.choices[0].message.content }, { role: 'user', content: 'And its colours?' });
      const r = await openai(srv).chat.completions.create({ model: 'x', max_tokens: N, temperature: 0, messages: main });
      c = await count();
      assert.equal(c.restored, 1);
      assert.equal(c.encoded, 2, 'the main picture was not encoded again');
      assert.ok(r.usage.prompt_tokens_details.cached_tokens >= first.usage.prompt_tokens,
                `resumed ${r.usage.prompt_tokens_details.cached_tokens} of ${first.usage.prompt_tokens}`);
      await openaiError(openai(srv).chat.completions.create({ model: 'x', max_tokens: 1, messages: main },
        { headers: { 'X-Pinhole-Auxiliary': 'maybe' } }), 400, /X-Pinhole-Auxiliary/);
      await openaiError(openai(srv).chat.completions.create({ model: 'x', max_tokens: 1, messages: main, auxiliary: 'yes' }),
        400, /auxiliary/);
    } finally { await stopServer(srv); }
  });
});
