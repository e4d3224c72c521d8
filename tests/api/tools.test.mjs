// Tool calling and structured output through the official clients. The
// synthetic model does not call tools on its own, so the server runs with
// --allow-forced-output and "forced_output" makes the model write a given
// text through the normal decode, parse and stream path; without forcing,
// tool_choice required/named and response formats must give valid output
// from random weights by the constraint alone.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';

import {
  anthropic, anthropicError, counters, diff, MODEL_ID, openai, openaiError, picture, QWEN35, reference, startServer,
  stopServer,
} from './helpers.mjs';
import { callEverywhere, callOne, callText, SEARCH, validate, WEATHER } from './tools-helpers.mjs';

const SYSTEM = 'You are terse.';
const ASK = { role: 'user', content: 'Weather in Paris and Tokyo?' };
const PARIS = { city: 'Paris' };
const TOKYO = { city: 'Tokyo', unit: 'celsius' };

let srv;
before(async () => { srv = await startServer({ vision: true, extra: ['--allow-forced-output'] }); });
after(async () => { await stopServer(srv); });

const forced = (text, more = {}) => ({ extra: { temperature: 0, forced_output: text, ...more } });
const args = (c) => JSON.parse(c.arguments);

// Python's json.dumps (", " and ": "), as the chat template's tojson.
const pyDumps = (v) => (Array.isArray(v) ? `[${v.map(pyDumps).join(', ')}]`
  : v && typeof v === 'object' ? `{${Object.entries(v).map(([k, x]) => `${JSON.stringify(k)}: ${pyDumps(x)}`).join(', ')}}`
    : JSON.stringify(v));

// The Hermes rendering of spec/tools.md 1.2, built here independently.
function hermes(system, tools, turns) {
  let s = '<|im_start|>system\n';
  if (system !== undefined) s += `${system}\n\n`;
  s += '# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>';
  for (const t of tools) s += `\n${pyDumps({ type: 'function', function: { name: t.name, description: t.description, parameters: t.parameters } })}`;
  s += '\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call><|im_end|>\n';
  for (let i = 0; i < turns.length; i++) {
    const m = turns[i];
    if (m.role === 'user') s += `<|im_start|>user\n${m.content}<|im_end|>\n`;
    else if (m.role === 'assistant') {
      s += `<|im_start|>assistant\n${m.content ?? ''}`;
      m.calls.forEach((c, k) => { s += `${k > 0 || m.content ? '\n' : ''}<tool_call>\n{"name": "${c.name}", "arguments": ${pyDumps(c.args)}}\n</tool_call>`; });
      s += '<|im_end|>\n';
    } else {
      if (turns[i - 1]?.role !== 'tool') s += '<|im_start|>user';
      s += `\n<tool_response>\n${m.content}\n</tool_response>`;
      if (turns[i + 1]?.role !== 'tool') s += '<|im_end|>\n';
    }
  }
  return `${s}<|im_start|>assistant\n`;
}

// Tool schemas as agents write them: ids, dates and paths with pattern and format.
const TICKET = {
  name: 'open_ticket',
  description: 'Open a ticket',
  parameters: {
    type: 'object',
    properties: {
      id: { type: 'string', pattern: '^[A-Z]{2,4}-[0-9]{1,5}$' },
      due: { type: 'string', format: 'date' },
      at: { type: 'string', format: 'date-time', maxLength: 32 },
      owner: { type: 'string', format: 'email', maxLength: 40 },
      host: { type: 'string', format: 'ipv4' },
      ref: { type: 'string', format: 'uuid' },
      path: { type: 'string', pattern: '^(/[a-z0-9_.-]+)+\\.(c|h|md)$', maxLength: 30 },
      word: { type: 'string', pattern: 'ab+c', maxLength: 12 },
    },
    required: ['id', 'due', 'owner', 'path', 'word'],
  },
};

const CITY = { ...WEATHER, parameters: { ...WEATHER.parameters, properties: { ...WEATHER.parameters.properties, city: { type: 'string', maxLength: 12 } } } };

// Sampled calls (temperature 1, seeds 1..seeds, every API, streamed and not;
// tool_choice choices[seed % choices.length]) must end the turn with the
// tool-call finish reason, nothing after them, arguments valid (ajv).
async function callsEndTheTurn(server, seeds, tools, choices, extraFor = {}) {
  const schemas = Object.fromEntries(tools.map((t) => [t.name, t.parameters]));
  for (let seed = 1; seed <= seeds; seed++) {
    for (const api of ['chat', 'responses', 'messages']) {
      for (const stream of [false, true]) {
        const choice = choices[seed % choices.length];
        const r = await callOne(server, api, stream, { messages: [{ role: 'user', content: 'Go.' }] }, 2000,
          { tools, choice, extra: { temperature: 1, seed }, extraFor });
        const what = `${api} ${choice} seed ${seed}${stream ? ' stream' : ''}`;
        assert.equal(r.finish, 'tool_calls', `${what}: finish`);
        assert.equal(r.content, '', `${what}: no text after the calls`);
        assert.ok(r.calls.length >= 1, what);
        for (const c of r.calls) {
          if (choice !== 'required') assert.equal(c.name, choice, what);
          validate(schemas[c.name], args(c));
        }
      }
    }
  }
}

describe('tool calls', { timeout: 600_000 }, () => {
  test('a call the model writes comes back as a call in every API, streamed and not', async () => {
    const outs = await callEverywhere(srv, { system: SYSTEM, messages: [ASK] }, 64,
      { tools: [WEATHER], ...forced(callText('get_weather', PARIS)) });
    for (const [name, r] of Object.entries(outs)) {
      assert.equal(r.finish, 'tool_calls', `${name}: finish`);
      assert.equal(r.content, '', `${name}: no text`);
      assert.equal(r.calls.length, 1, `${name}: one call`);
      assert.equal(r.calls[0].name, 'get_weather', name);
      assert.deepEqual(args(r.calls[0]), PARIS, `${name}: arguments`);
    }
    // the arguments as the model wrote them (Messages gives an object)
    for (const name of ['chat', 'chat stream', 'responses', 'responses stream', 'messages stream'])
      assert.equal(outs[name].calls[0].arguments, '{"city": "Paris"}', `${name}: raw arguments`);
  });

  test('text before parallel calls, and a call inside the reasoning stays reasoning', async () => {
    const text = `<think>\nMaybe <tool_call> is right.\n</think>\n\nLet me check.\n${callText('get_weather', PARIS)}\n${callText('get_weather', TOKYO)}`;
    const outs = await callEverywhere(srv, { messages: [ASK] }, 128, { tools: [WEATHER], ...forced(text) });
    for (const [name, r] of Object.entries(outs)) {
      assert.equal(r.finish, 'tool_calls', `${name}: finish`);
      assert.equal(r.content.trimEnd(), 'Let me check.', `${name}: content`);
      assert.equal(r.reasoning.trim(), 'Maybe <tool_call> is right.', `${name}: reasoning`);
      assert.deepEqual(r.calls.map((c) => [c.name, args(c)]), [['get_weather', PARIS], ['get_weather', TOKYO]], name);
      assert.equal(new Set(r.calls.map((c) => c.id)).size, 2, `${name}: distinct ids`);
    }
  });

  test('parallel_tool_calls false / disable_parallel_tool_use: the answer ends after its first call', async () => {
    const text = `${callText('get_weather', PARIS)}\n${callText('get_weather', TOKYO)}`;
    const outs = await callEverywhere(srv, { messages: [ASK] }, 128, { tools: [WEATHER], parallel: false, ...forced(text) });
    for (const [name, r] of Object.entries(outs)) {
      assert.equal(r.finish, 'tool_calls', `${name}: finish`);
      assert.deepEqual(r.calls.map((c) => args(c)), [PARIS], name);
    }
  });

  test('a call that does not parse, or names an undeclared tool, comes back as text', async () => {
    for (const bad of ['<tool_call>\nnot json\n</tool_call>', callText('get_time', { zone: 'UTC' })]) {
      for (const stream of [false, true]) {
        const r = await callOne(srv, 'chat', stream, { messages: [ASK] }, 64, { tools: [WEATHER], ...forced(bad) });
        assert.equal(r.calls.length, 0, bad);
        assert.equal(r.finish, 'stop');
        assert.equal(r.content, bad, 'the raw text, nothing dropped');
      }
    }
  });

  test('a call cut off by max_tokens keeps its name and the arguments so far', async () => {
    for (const stream of [false, true]) {
      const r = await callOne(srv, 'chat', stream, { messages: [ASK] }, 16, { tools: [WEATHER], ...forced(callText('get_weather', TOKYO)) });
      assert.equal(r.finish, 'length');
      assert.equal(r.calls.length, 1);
      assert.equal(r.calls[0].name, 'get_weather');
      assert.ok(r.calls[0].arguments.length > 0 && '{"city": "Tokyo", "unit": "celsius"}'.startsWith(r.calls[0].arguments),
                `a prefix of the arguments: ${r.calls[0].arguments}`);
    }
  });

  test('tool_choice none: a call is not parsed', async () => {
    const text = callText('get_weather', PARIS);
    const outs = await callEverywhere(srv, { messages: [ASK] }, 64, { tools: [WEATHER], choice: 'none', ...forced(text) });
    for (const [name, r] of Object.entries(outs)) {
      assert.equal(r.calls.length, 0, name);
      assert.equal(r.finish, 'stop', name);
      assert.equal(r.content, text, name);
    }
  });

  test('the agent loop: results go back rendered as the template does, and the loop reuses its state', async () => {
    const first = await callOne(srv, 'chat', false, { system: SYSTEM, messages: [ASK] }, 64,
      { tools: [WEATHER], ...forced(`${callText('get_weather', PARIS)}\n${callText('get_weather', TOKYO)}`) });
    assert.equal(first.calls.length, 2);
    const history = [
      ASK,
      { role: 'assistant', content: null, tool_calls: first.calls.map((c) => ({ id: c.id, type: 'function', function: { name: c.name, arguments: c.arguments } })) },
      { role: 'tool', tool_call_id: first.calls[0].id, content: '{"temp": 18}' },
      { role: 'tool', tool_call_id: first.calls[1].id, content: '{"temp": 25}' },
    ];
    const raw = hermes(SYSTEM, [WEATHER], [{ role: 'user', content: ASK.content },
      { role: 'assistant', content: null, calls: [{ name: 'get_weather', args: PARIS }, { name: 'get_weather', args: TOKYO }] },
      { role: 'tool', content: '{"temp": 18}' }, { role: 'tool', content: '{"temp": 25}' }]);
    const expect = await referenceRaw(raw, 8);
    for (const api of ['chat', 'responses', 'messages']) {
      const r = await callOne(srv, api, false, { system: SYSTEM, messages: history }, 8, { tools: [WEATHER], extra: { temperature: 0 } });
      assert.equal(r.content, expect.text, `${api}: the answer to the rendered prompt of spec 1.2`);
      assert.ok(r.cached >= first.prompt, `${api}: the first request's prompt is reused (${r.cached} of ${r.prompt})`);
    }
    // the first iteration's own calls are in the KV: the next prompt reuses them too
    const one = await callOne(srv, 'chat', false, { system: SYSTEM, messages: [ASK] }, 64,
      { tools: [WEATHER], ...forced(`${callText('get_weather', PARIS)}\n${callText('get_weather', TOKYO)}`) });
    const again = await callOne(srv, 'chat', false, { system: SYSTEM, messages: history }, 8, { tools: [WEATHER], extra: { temperature: 0 } });
    assert.equal(again.content, expect.text);
    assert.ok(again.cached >= one.prompt + one.completion - 1,
              `the calls' rows are reused too: ${again.cached} of ${again.prompt} (first prompt ${one.prompt} + ${one.completion})`);
  });

  test('a screenshot in a tool result is rendered in place, and encoded once for the whole loop', async () => {
    const shot = picture('small.png');
    const history = [
      { role: 'user', content: 'Look at the screen.' },
      { role: 'assistant', content: null, tool_calls: [{ id: 'call_1', type: 'function', function: { name: 'screenshot', arguments: '{}' } }] },
      { role: 'tool', tool_call_id: 'call_1', content: [{ type: 'text', text: 'Screenshot:' }, { type: 'image_url', image_url: { url: shot.url } }] },
    ];
    const SHOT = { name: 'screenshot', description: 'Take a screenshot', parameters: { type: 'object', properties: {} } };
    const raw = hermes(undefined, [SHOT], [{ role: 'user', content: 'Look at the screen.' },
      { role: 'assistant', content: null, calls: [{ name: 'screenshot', args: {} }] }, { role: 'tool', content: 'Screenshot:<__image__>' }]);
    const expect = await referenceRaw(raw, 8, ['small.png']);
    let encoded = 0;
    for (const api of ['chat', 'responses', 'messages']) {
      const c0 = await counters(srv);
      const r = await callOne(srv, api, false, { messages: history }, 8, { tools: [SHOT], extra: { temperature: 0 } });
      const d = diff(c0, await counters(srv));
      encoded += d.encoded;
      assert.equal(r.content, expect.text, `${api}: the answer to the prompt with the picture inside <tool_response>`);
      if (api !== 'chat') assert.equal(d.encoded, 0, `${api}: the screenshot is not encoded again`);
    }
    assert.ok(encoded <= 1);
  });
});

describe('the constraint alone', { timeout: 600_000 }, () => {
  test('tool_choice required and named: a well-formed call to a declared tool, valid against its schema', async () => {
    const schemas = { get_weather: WEATHER.parameters, search: SEARCH.parameters };
    for (const api of ['chat', 'responses', 'messages']) {
      for (const [i, choice] of ['required', 'search'].entries()) {
        for (const stream of [false, true]) {
          const seed = 100 + i * 2 + (stream ? 1 : 0);
          const r = await callOne(srv, api, stream, { messages: [{ role: 'user', content: 'Go.' }] }, 1500,
            { tools: [WEATHER, SEARCH], choice, parallel: false, extra: { temperature: 1, seed } });
          const what = `${api} ${choice}${stream ? ' stream' : ''}`;
          assert.equal(r.finish, 'tool_calls', `${what}: finish`);
          assert.equal(r.calls.length, 1, what);
          if (choice !== 'required') assert.equal(r.calls[0].name, choice, what);
          assert.ok(r.calls[0].name in schemas, `${what}: a declared tool`);
          validate(schemas[r.calls[0].name], args(r.calls[0]));
        }
      }
    }
  });

  test('a call ends the turn: required and named calls end with the tool-call finish reason and nothing after them (25 seeds)', async () => {
    await callsEndTheTurn(srv, 25, [CITY, SEARCH], ['search', 'required']);
  });

  test('pattern and format in a tool schema: every call validates (ajv, 10 seeds, every API, streamed and not)', async () => {
    await callsEndTheTurn(srv, 10, [TICKET], ['required']);
  });

  test('a keyword the constraint cannot hold loses only its own constraint, not the tool\'s', async () => {
    const tool = {
      name: 'tag',
      description: 'Tag a line',
      parameters: {
        type: 'object',
        properties: {
          code: { type: 'string', pattern: '^[0-9]{3}$' },
          note: { type: 'string', pattern: '(?<=a)b', maxLength: 10 }, /* a look-behind: dropped */
          level: { type: 'integer', minimum: 1, maximum: 5, not: { const: 3 } }, /* 'not': dropped */
        },
        required: ['code', 'note', 'level'],
      },
    };
    const kept = structuredClone(tool.parameters);
    delete kept.properties.note.pattern;
    delete kept.properties.level.not;
    for (let seed = 1; seed <= 5; seed++) {
      for (const api of ['chat', 'responses', 'messages']) {
        const r = await callOne(srv, api, seed % 2 === 0, { messages: [{ role: 'user', content: 'Tag.' }] }, 1000,
          { tools: [tool], choice: 'tag', extra: { temperature: 1, seed } });
        assert.equal(r.finish, 'tool_calls', `${api} seed ${seed}`);
        validate(kept, args(r.calls[0]));
      }
    }
  });

  const RESULT = {
    type: 'object',
    properties: {
      code: { type: 'string', pattern: '^[a-z]{3}-[0-9]{2}$' },
      day: { type: 'string', format: 'date' },
      answer: { type: 'string', maxLength: 16 },
      score: { type: 'integer' },
      ok: { type: 'boolean' },
      tags: { type: 'array', items: { enum: ['x', 'y'] }, maxItems: 4 },
      note: { anyOf: [{ type: 'string', maxLength: 8 }, { type: 'null' }] },
      detail: { $ref: '#/$defs/detail' },
    },
    required: ['code', 'day', 'answer', 'score', 'ok', 'detail'],
    $defs: { detail: { type: 'object', properties: { level: { enum: [1, 2, 3] }, ratio: { type: 'number' } }, required: ['level'] } },
  };

  test('response formats: every sampled answer parses and validates (temperature 1, many seeds)', async () => {
    const oa = openai(srv);
    const an = anthropic(srv);
    const ask = [{ role: 'user', content: 'Rate it.' }];
    let objects = 0;
    for (let seed = 1; seed <= 4; seed++) {
      const c = await oa.chat.completions.create({ model: MODEL_ID, messages: ask, max_tokens: 1500, temperature: 1, seed,
        response_format: { type: 'json_schema', json_schema: { name: 'result', schema: RESULT, strict: true } } });
      assert.equal(c.choices[0].finish_reason, 'stop');
      validate(RESULT, JSON.parse(c.choices[0].message.content));
      const o = await oa.chat.completions.create({ model: MODEL_ID, messages: ask, max_tokens: 1500, temperature: 1, seed,
        response_format: { type: 'json_object' } });
      /* a free-form object may run past max_tokens (a random model's string can go on): then it is cut */
      if (o.choices[0].finish_reason === 'stop') {
        const v = JSON.parse(o.choices[0].message.content);
        assert.ok(v && typeof v === 'object' && !Array.isArray(v), 'json_object gives an object');
        objects++;
      } else {
        assert.equal(o.choices[0].finish_reason, 'length');
        assert.match(o.choices[0].message.content, /^\s*\{/, 'a cut json_object answer is still the start of an object');
      }
      const r = await oa.responses.create({ model: MODEL_ID, input: 'Rate it.', max_output_tokens: 1500, temperature: 1, seed,
        text: { format: { type: 'json_schema', name: 'result', schema: RESULT, strict: true } } });
      assert.equal(r.status, 'completed');
      validate(RESULT, JSON.parse(r.output_text));
      const m = await an.messages.create({ model: MODEL_ID, messages: ask, max_tokens: 1500, temperature: 1, seed,
        output_config: { format: { type: 'json_schema', schema: RESULT } } });
      assert.equal(m.stop_reason, 'end_turn');
      validate(RESULT, JSON.parse(m.content[0].text));
    }
    assert.ok(objects >= 2, `json_object: ${objects} of 4 answers ended (the others ran into max_tokens)`);
    // streamed
    const s = await oa.chat.completions.create({ model: MODEL_ID, messages: ask, max_tokens: 1500, temperature: 1, seed: 9,
      stream: true, response_format: { type: 'json_schema', json_schema: { name: 'result', schema: RESULT } } });
    let text = '';
    for await (const ch of s) text += ch.choices[0]?.delta?.content ?? '';
    validate(RESULT, JSON.parse(text));
  });

  test('a response schema outside the subset is refused with 400 naming the keyword and its path', async () => {
    const oa = openai(srv);
    for (const [bad, re] of [
      [{ type: 'object', properties: { zip: { type: 'string', pattern: '^(?<=x)[0-9]{5}$' } } }, /'pattern' at \$\.properties\.zip.*look-behind/],
      [{ type: 'object', properties: { zip: { type: 'string', pattern: '^(a)\\1$' } } }, /'pattern' at \$\.properties\.zip.*back-reference/],
      [{ type: 'object', properties: { n: { type: 'integer', not: { const: 1 } } } }, /'not' at \$\.properties\.n/],
    ]) {
      await openaiError(oa.chat.completions.create({ model: MODEL_ID, messages: [ASK], max_tokens: 4,
        response_format: { type: 'json_schema', json_schema: { name: 'x', schema: bad } } }), 400, re);
      await openaiError(oa.responses.create({ model: MODEL_ID, input: 'x', max_output_tokens: 4,
        text: { format: { type: 'json_schema', name: 'x', schema: bad } } }), 400, re);
      await anthropicError(anthropic(srv).messages.create({ model: MODEL_ID, messages: [ASK], max_tokens: 4,
        output_config: { format: { type: 'json_schema', schema: bad } } }), 400, 'invalid_request_error', re);
    }
  });
});

// Qwen3.5 writes calls in the xml family's syntax (<function=NAME>
// <parameter=KEY> ...): the constraint follows that syntax, string
// parameters as raw text, the others as JSON.
describe('the constraint alone, xml calls (Qwen3.5)', { timeout: 600_000 }, () => {
  let q35;
  before(async () => { q35 = await startServer({ model: QWEN35, vision: false, extra: ['--any-model'] }); });
  after(async () => { await stopServer(q35); });
  const OFF = { chat: { reasoning_effort: 'none' }, responses: { reasoning: { effort: 'none' } }, messages: { thinking: { type: 'disabled' } } };

  test('required and named calls end with the tool-call finish reason, arguments valid (ajv), 8 seeds, every API, streamed and not', async () => {
    await callsEndTheTurn(q35, 8, [CITY, SEARCH, TICKET], ['required', 'search', 'open_ticket'], OFF);
  });
});

// `pinhole run --raw` on a prompt given as is (the reference for rendering).
async function referenceRaw(raw, n, images = []) {
  return reference({ raw, images }, n);
}
