// The state cache's cases through the server, on any model pair (helpers'
// QWEN3VL or QWEN35): reuse.test.mjs runs them on the Qwen3-VL pair,
// reuse-qwen35.test.mjs on the Qwen3.5 one. A Qwen3-VL turn reuses any
// common prefix; a Qwen3.5 turn only the longest one that ends at a
// snapshot of the recurrent state (docs/server.md, "How reuse works"): after each
// picture and after the answer's header at the end of each prompt, before
// its <think> opener. Every warm answer is checked against a cold server's
// (--no-cache).
import assert from 'node:assert/strict';
import { existsSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import zlib from 'node:zlib';

import {
  anthropic, metric, metrics, openai, openaiError, picture, startServer, stopServer, turnVsCold as turn,
} from './helpers.mjs';

export const N = 6;

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

export const url = (name) => picture(name).url;
export const gen = (seed) => `data:image/png;base64,${png(64, 64, seed).toString('base64')}`;
export const pic = (u) => ({ type: 'image_url', image_url: { url: u } });
export const text = (t) => ({ type: 'text', text: t });

// r resumes the conversation of prev (its history re-sent with more):
// Qwen3-VL from prev's whole prompt on, Qwen3.5 from its snapshot before
// the opener. reused: the rows r took from where it resumed.
function resumesAfter(M, prev, reused, what) {
  if (M.recurrent) assert.equal(reused, prev.prompt - M.opener, `${what}: resumed at the snapshot before the opener`);
  else assert.ok(reused >= prev.prompt, `${what}: reused ${reused}, the history has ${prev.prompt}`);
}

// r differs from a first in a picture that comes after some text: only
// that text is reused (Qwen3.5: nothing, no snapshot is taken before a
// picture).
function onlyTextBefore(M, a, r, what) {
  assert.ok(r.cached < a.prompt - 10, `${what}: only the text before the picture is reused (${r.cached} of ${a.prompt})`);
  if (M.recurrent) assert.equal(r.cached, 0, `${what}: no snapshot before the picture`);
}

export function reuseCases(M) {
  describe(`reuse through the server (${M.id})`, { timeout: 600_000 }, () => {
    let warm, cold;
    before(async () => {
      [warm, cold] = await Promise.all([startServer({ model: M }), startServer({ model: M, extra: ['--no-cache'] })]);
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
        resumesAfter(M, prev, r.cached, `turn ${t}`);
        assert.equal(r.d.reused, r.cached, 'metrics and usage agree');
        // the conversation goes on in the live state: nothing is moved to the RAM tier
        // (Qwen3.5 drops only its answer opener, cheaper to evaluate again than to save)
        assert.equal(r.d.ram_saves, 0, `turn ${t}: the live conversation is not saved away`);
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
      if (M.recurrent) {
        assert.equal(r.cached, 0, 'edited: no snapshot before the edit');
      } else {
        assert.ok(r.cached > 0 && r.cached < first.prompt, `edited: reused ${r.cached} of ${first.prompt}`);
        assert.ok(r.cached <= sys.prompt - 4, `edited: reused ${r.cached}, the prefix before the edit is shorter`);
      }
      assert.equal(r.d.encoded, 0, 'the picture after the edit comes from the embedding cache');
      assert.equal(r.d.hits, 1);
    });

    test('a different picture of the same size in the same place is encoded, its rows not reused', async () => {
      const conv = (u) => [{ role: 'user', content: [text('Look:'), pic(u), text('What is it?')] }];
      const a = await turn(warm, cold, conv(gen(1)), 'picture 1');
      const b = await turn(warm, cold, conv(gen(2)), 'picture 2, same size');
      assert.equal(b.d.encoded, 1);
      onlyTextBefore(M, a, b, 'picture 2');
    });

    test('a new picture appended after the history reuses the whole history', async () => {
      const msgs = [{ role: 'user', content: [pic(url('small.png')), text('Describe.')] }];
      const first = await turn(warm, cold, msgs, 'first');
      msgs.push({ role: 'assistant', content: 'Fine.' }, { role: 'user', content: [text('And this one?'), pic(gen(3))] });
      const r = await turn(warm, cold, msgs, 'appended');
      resumesAfter(M, first, r.cached, 'appended');
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
      resumesAfter(M, a1, a2.d.ram, 'A2 from A1\'s checkpoint');
      assert.equal(a2.cached, a2.d.ram, 'A2: every reused row from the checkpoint');
      assert.equal(a2.d.encoded + a2.d.hits, 0, 'A2 needs its picture neither encoded nor from the embedding cache');
      const b2 = await turn(warm, cold, conv(ub, 2), 'B2');
      resumesAfter(M, b1, b2.d.ram, 'B2 from B1\'s checkpoint');
      assert.equal(b2.cached, b2.d.ram, 'B2: every reused row from the checkpoint');
      assert.equal(b2.d.encoded + b2.d.hits, 0);
    });

    test('a RAM checkpoint is never used for another picture', async () => {
      const conv = (u) => [{ role: 'user', content: [text('Look here:'), pic(u), text('What is it?')] }];
      const x = await turn(warm, cold, conv(gen(22)), 'picture 22');
      await turn(warm, cold, [{ role: 'user', content: 'Something else entirely.' }], 'a text chat in between');
      const y = await turn(warm, cold, conv(gen(23)), 'picture 23, same size and place');
      assert.equal(y.d.encoded, 1);
      onlyTextBefore(M, x, y, 'picture 23');
    });

    test('the same picture twice in one message is encoded once', async () => {
      const u = gen(4);
      const r = await turn(warm, cold, [{ role: 'user', content: [pic(u), text('and'), pic(u), text('Same?')] }], 'twice');
      assert.equal(r.d.encoded, 1);
      assert.equal(r.d.misses, 1, 'looked up once');
    });
  });
}

export function auxiliaryCases(M) {
  describe(`auxiliary requests (an agent's side calls) (${M.id})`, { timeout: 600_000 }, () => {
    // one slot: the side calls park the main conversation, the next main turn
    // restores it; several: they run in other slots, the main conversation
    // stays in its own. Either way the next main turn resumes all of it.
    for (const slots of [1, 4]) test(`side calls (--parallel ${slots}) leave the main conversation; the next main turn resumes it`, async () => {
      // the RAM tier is off: only the parked slot (or its own) can bring the conversation back
      // --any-model on purpose: this server is asked for model 'x' (a client that hard-codes a name)
      const srv = await startServer({ model: M, extra: ['--cache-ram-mib', '0', '--any-model', '--parallel', String(slots)] });
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
        assert.equal(c.parked, slots === 1 ? 1 : 0, slots === 1 ? 'parked once, by the first side call' : 'nothing parked');
        main.push({ role: 'assistant', content: first.choices[0].message.content }, { role: 'user', content: 'And its colours?' });
        const r = await openai(srv).chat.completions.create({ model: 'x', max_tokens: N, temperature: 0, messages: main });
        c = await count();
        assert.equal(c.restored, slots === 1 ? 1 : 0);
        assert.equal(c.encoded, 2, 'the main picture was not encoded again');
        resumesAfter(M, { prompt: first.usage.prompt_tokens }, r.usage.prompt_tokens_details.cached_tokens, 'resumed');
        await openaiError(openai(srv).chat.completions.create({ model: 'x', max_tokens: 1, messages: main },
          { headers: { 'X-Pinhole-Auxiliary': 'maybe' } }), 400, /X-Pinhole-Auxiliary/);
        await openaiError(openai(srv).chat.completions.create({ model: 'x', max_tokens: 1, messages: main, auxiliary: 'yes' }),
          400, /auxiliary/);
      } finally { await stopServer(srv); }
    });
  });
}

// ---- the disk tier ------------------------------------------------------

export const oraclePic = (name) => pic(url(name));

// The disk tier's segment files (docs/state-cache.md, Disk tier), as paths
// under dir: DIR/blocks/seg-<id>.phbs.
export const checkpointFiles = (dir) => {
  const blocks = join(dir, 'blocks');
  if (!existsSync(blocks)) return [];
  return readdirSync(blocks).filter((f) => f.startsWith('seg-') && f.endsWith('.phbs')).map((f) => join('blocks', f));
};

// Two turns of a picture chat on a server that saves to dir; returns the
// server, the conversation (with a third question) and turn 2's result.
export async function twoTurns(M, dir, cold) {
  const srv = await startServer({ model: M, extra: ['--kv-disk-dir', dir] });
  const msgs = [
    { role: 'system', content: 'You are a careful assistant who describes pictures in detail.' },
    { role: 'user', content: [text('Here is my photo:'), oraclePic('grad.png'), text('What is in this picture?')] },
  ];
  const t1 = await turn(srv, cold, msgs, 'turn 1');
  assert.equal(t1.d.encoded, 1);
  msgs.push({ role: 'assistant', content: 'It is a picture.' }, { role: 'user', content: 'Tell me more.' });
  const t2 = await turn(srv, cold, msgs, 'turn 2');
  msgs.push({ role: 'assistant', content: 'It has colours.' }, { role: 'user', content: 'And the colours?' });
  return { srv, msgs, t2 };
}

// Turn 3 on a fresh server over the same folder resumes from disk.
export async function resumes(M, dir, cold, msgs, t2, what) {
  const srv = await startServer({ model: M, extra: ['--kv-disk-dir', dir] });
  try {
    const t3 = await turn(srv, cold, msgs, what);
    assert.equal(t3.d.encoded, 0, `${what}: nothing encoded`);
    resumesAfter(M, t2, t3.cached, `${what}: turn 2's prompt restored`);
    assert.equal(t3.d.disk, t3.cached, `${what}: every reused row came from the file`);
    assert.equal(t3.d.disk_hits, 1);
    assert.match(srv.stderr, /from a checkpoint file/);
  } finally {
    await stopServer(srv);
  }
}

// A picture chat saved to dir, the server stopped with SIGTERM, the chat
// resumed from disk by a fresh one.
export async function resumesAfterSigterm(M, dir, cold) {
  const { srv, msgs, t2 } = await twoTurns(M, dir, cold);
  await stopServer(srv);
  assert.ok(checkpointFiles(dir).length >= 1, 'a checkpoint file was written');
  await resumes(M, dir, cold, msgs, t2, 'turn 3 after SIGTERM');
}
