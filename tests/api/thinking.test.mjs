// The thinking budget: Anthropic thinking.budget_tokens and the extension
// thinking_budget of the two OpenAI APIs bound the reasoning of a thinking
// model (the tiny Qwen3.5, whose answers start inside <think>); at the
// budget the end of the reasoning is forced and the answer follows. Random
// weights, temperature 1, 25 seeds, each API, streamed and not.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';

import { anthropic, openai, QWEN35, startServer, stopServer } from './helpers.mjs';

let srv;
before(async () => { srv = await startServer({ model: QWEN35, vision: false }); });
after(async () => { await stopServer(srv); });

const ask = [{ role: 'user', content: 'Think briefly, then answer.' }];
const MAX = 40;

async function chat(stream, seed, budget) {
  const body = { model: QWEN35.id, messages: ask, max_tokens: MAX, temperature: 1, seed, thinking_budget: budget };
  const oa = openai(srv);
  if (!stream) {
    const r = await oa.chat.completions.create(body);
    return { reasoning: r.choices[0].message.reasoning_content ?? '', content: r.choices[0].message.content ?? '',
             n: r.usage.completion_tokens_details.reasoning_tokens, total: r.usage.completion_tokens };
  }
  const s = await oa.chat.completions.create({ ...body, stream: true, stream_options: { include_usage: true } });
  let reasoning = '', content = '', n, total;
  for await (const ch of s) {
    reasoning += ch.choices[0]?.delta?.reasoning_content ?? '';
    content += ch.choices[0]?.delta?.content ?? '';
    if (ch.usage) { n = ch.usage.completion_tokens_details.reasoning_tokens; total = ch.usage.completion_tokens; }
  }
  return { reasoning, content, n, total };
}

async function responses(stream, seed, budget) {
  const body = { model: QWEN35.id, input: ask, max_output_tokens: MAX, temperature: 1, seed, thinking_budget: budget };
  const oa = openai(srv);
  let r;
  if (!stream) r = await oa.responses.create(body);
  else for await (const ev of await oa.responses.create({ ...body, stream: true })) if (ev.type === 'response.completed' || ev.type === 'response.incomplete') r = ev.response;
  const text = (t) => r.output.filter((o) => o.type === t).flatMap((o) => o.content).map((p) => p.text).join('');
  return { reasoning: text('reasoning'), content: text('message'), n: r.usage.output_tokens_details.reasoning_tokens,
           total: r.usage.output_tokens };
}

async function messages(stream, seed, budget) {
  const body = { model: QWEN35.id, messages: ask, max_tokens: MAX, temperature: 1, seed,
                 thinking: { type: 'enabled', budget_tokens: budget } };
  const an = anthropic(srv);
  const m = stream ? await an.messages.stream(body).finalMessage() : await an.messages.create(body);
  const text = (t, k) => m.content.filter((b) => b.type === t).map((b) => b[k]).join('');
  return { reasoning: text('thinking', 'thinking'), content: text('text', 'text'), total: m.usage.output_tokens };
}

describe('thinking budget', { timeout: 600_000 }, () => {
  test('the reasoning stops at the budget and the answer follows, in every API (25 seeds)', async () => {
    for (let seed = 1; seed <= 25; seed++) {
      const budget = seed % 9;
      for (const [api, call] of Object.entries({ chat, responses, messages })) {
        for (const stream of [false, true]) {
          const what = `${api} seed ${seed} budget ${budget}${stream ? ' stream' : ''}`;
          const r = await call(stream, seed, budget);
          if (r.n !== undefined) assert.ok(r.n <= budget, `${what}: ${r.n} reasoning tokens`);
          /* the end of the reasoning takes a few tokens; the answer has the rest */
          assert.ok(r.content.length > 0, `${what}: an answer after the reasoning (${JSON.stringify(r)})`);
          assert.ok(!r.content.includes('</think>') && !r.reasoning.includes('</think>'), what);
        }
      }
    }
  });

  test('without a budget the reasoning tokens are counted too', async () => {
    const r = await chat(false, 7, undefined);
    assert.ok(r.n > 0 && r.n <= r.total, JSON.stringify(r));
  });
});
