// Three streaming clients at once on a server of three slots (--parallel 3):
// every answer is the one the same request gets alone, and their rows were
// evaluated together (batch steps with rows of more than one request).
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';

import { chatStream, metric, metrics, MODEL_ID, openai, startServer, stopServer } from './helpers.mjs';

const PROMPTS = [
  'Name three colours and say which you like best.',
  'Tell me a very short story about a lighthouse keeper.',
  'What is seven times eight? Explain.',
];
const N = 24;

function ask(srv, prompt) {
  return openai(srv).chat.completions.create({
    model: MODEL_ID, messages: [{ role: 'user', content: prompt }], max_tokens: N, temperature: 0,
    stream: true, stream_options: { include_usage: true },
  }).then(chatStream);
}

describe('three streams at once (--parallel 3)', () => {
  let srv;
  before(async () => { srv = await startServer({ vision: false, extra: ['--parallel', '3', '--no-reuse'] }); });
  after(async () => { await stopServer(srv); });

  test('each answer equals the same request alone; steps held several requests', async () => {
    const alone = [];
    for (const p of PROMPTS) alone.push(await ask(srv, p));
    const before = metric(await metrics(srv), 'pinhole_batch_steps_shared_total');
    const together = await Promise.all(PROMPTS.map((p) => ask(srv, p)));
    for (let i = 0; i < PROMPTS.length; i++) {
      assert.equal(together[i].text, alone[i].text, `request ${i}: the same text as alone`);
      assert.equal(together[i].completion, alone[i].completion, `request ${i}: the same number of tokens`);
    }
    const m = await metrics(srv);
    assert.ok(metric(m, 'pinhole_batch_steps_shared_total') > before, 'steps with rows of several requests');
    assert.equal(metric(m, 'pinhole_requests_running'), 0);
    assert.ok(metric(m, 'pinhole_batch_rows_count') >= metric(m, 'pinhole_batch_steps_shared_total'));
  });
});
