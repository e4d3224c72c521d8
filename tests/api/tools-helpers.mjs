// Tool calls through the three APIs, streamed and not, collected into one
// shape: { content, reasoning, calls: [{ id, name, arguments }], finish
// ('tool_calls' | 'stop' | 'length'), prompt, cached }. Each collector
// checks its API's event grammar on the way.
import assert from 'node:assert/strict';

import Ajv2020Module from 'ajv/dist/2020.js';
import addFormatsModule from 'ajv-formats';

import { anthropic, MODEL_ID, openai } from './helpers.mjs';

const Ajv2020 = Ajv2020Module.default ?? Ajv2020Module;
const addFormats = addFormatsModule.default ?? addFormatsModule;

export const WEATHER = {
  name: 'get_weather',
  description: 'Get current weather for a city',
  parameters: {
    type: 'object',
    properties: { city: { type: 'string', description: 'City name' }, unit: { type: 'string', enum: ['celsius', 'fahrenheit'] } },
    required: ['city'],
  },
};
export const SEARCH = {
  name: 'search',
  description: 'Search the notes',
  parameters: {
    type: 'object',
    properties: {
      query: { type: 'string', maxLength: 24 },
      limit: { type: 'integer' },
      tags: { type: 'array', items: { type: 'string', enum: ['a', 'b', 'c'] }, maxItems: 3 },
      exact: { type: 'boolean' },
    },
    required: ['query', 'limit'],
  },
};

export const chatTools = (tools) => tools.map((t) => ({ type: 'function', function: t }));
export const respTools = (tools) => tools.map((t) => ({ type: 'function', ...t }));
export const msgTools = (tools) => tools.map((t) => ({ name: t.name, description: t.description, input_schema: t.parameters }));

/** A Hermes tool call as the model writes it. */
export const callText = (name, args) => `<tool_call>\n{"name": "${name}", "arguments": ${JSON.stringify(args, null, 0).replace(/":/g, '": ').replace(/,"/g, ', "')}}\n</tool_call>`;

// ---- non-streamed --------------------------------------------------------

export function chatCalls(r) {
  const c = r.choices[0];
  const calls = (c.message.tool_calls ?? []).map((t) => {
    assert.equal(t.type, 'function');
    assert.match(t.id, /^call_[0-9a-zA-Z]{16,}$/, 'a call id');
    return { id: t.id, name: t.function.name, arguments: t.function.arguments };
  });
  if (calls.length && !c.message.content) assert.equal(c.message.content, null, 'content is null when only calls');
  return { content: c.message.content ?? '', reasoning: c.message.reasoning_content ?? '', calls,
           finish: c.finish_reason, prompt: r.usage.prompt_tokens, completion: r.usage.completion_tokens,
           cached: r.usage.prompt_tokens_details.cached_tokens };
}

export function responsesCalls(r) {
  let content = '', reasoning = '';
  const calls = [];
  for (const o of r.output) {
    if (o.type === 'message') content += o.content.map((p) => p.text).join('');
    else if (o.type === 'reasoning') reasoning += o.content.map((p) => p.text).join('');
    else if (o.type === 'function_call') {
      assert.match(o.id, /^fc_/, 'a function_call item id');
      assert.match(o.call_id, /^call_/, 'a call_id');
      assert.equal(o.status, 'completed');
      calls.push({ id: o.call_id, name: o.name, arguments: o.arguments });
    } else assert.fail(`output item type ${o.type}`);
  }
  const finish = r.status === 'incomplete' ? 'length' : calls.length ? 'tool_calls' : 'stop';
  return { content, reasoning, calls, finish, prompt: r.usage.input_tokens, cached: r.usage.input_tokens_details.cached_tokens };
}

export function messagesCalls(r) {
  let content = '', reasoning = '';
  const calls = [];
  for (const b of r.content) {
    if (b.type === 'text') content += b.text;
    else if (b.type === 'thinking') reasoning += b.thinking;
    else if (b.type === 'tool_use') {
      assert.match(b.id, /^toolu_/, 'a tool_use id');
      assert.equal(typeof b.input, 'object');
      calls.push({ id: b.id, name: b.name, arguments: JSON.stringify(b.input) });
    } else assert.fail(`content block type ${b.type}`);
  }
  const finish = { tool_use: 'tool_calls', end_turn: 'stop', max_tokens: 'length', stop_sequence: 'stop' }[r.stop_reason];
  return { content, reasoning, calls, finish, prompt: r.usage.input_tokens + r.usage.cache_read_input_tokens,
           cached: r.usage.cache_read_input_tokens };
}

// ---- streamed ------------------------------------------------------------

export async function chatCallsStream(stream) {
  let content = '', reasoning = '', finish = null, usage = null;
  const calls = [];
  for await (const ch of stream) {
    if (ch.usage) usage = ch.usage;
    const c = ch.choices[0];
    if (!c) continue;
    const d = c.delta ?? {};
    if (typeof d.content === 'string') content += d.content;
    if (typeof d.reasoning_content === 'string') reasoning += d.reasoning_content;
    for (const t of d.tool_calls ?? []) {
      if (t.index === calls.length) {
        assert.match(t.id, /^call_/, 'the first delta of a call has its id');
        assert.equal(t.type, 'function');
        assert.equal(typeof t.function.name, 'string', 'the first delta of a call has its name');
        calls.push({ id: t.id, name: t.function.name, arguments: t.function.arguments ?? '' });
      } else {
        assert.equal(t.index, calls.length - 1, 'argument pieces belong to the last call');
        assert.equal(t.id, undefined);
        calls[t.index].arguments += t.function.arguments;
      }
    }
    if (c.finish_reason) finish = c.finish_reason;
  }
  if (calls.length) assert.ok(!/<tool_/.test(content), `no <tool_ fragment in content: ${JSON.stringify(content)}`);
  return { content, reasoning, calls, finish, prompt: usage?.prompt_tokens, cached: usage?.prompt_tokens_details?.cached_tokens };
}

export async function responsesCallsStream(stream) {
  const events = [];
  for await (const ev of stream) events.push(ev);
  const last = events.at(-1);
  assert.ok(['response.completed', 'response.incomplete'].includes(last.type), `last event ${last.type}`);
  const open = new Map(); // output_index -> item
  const args = new Map();
  for (const e of events) {
    if (e.type === 'response.output_item.added') {
      assert.ok(![...open.values()].some((x) => !x.done), 'items are sequential');
      open.set(e.output_index, { item: e.item, done: false });
      if (e.item.type === 'function_call') {
        assert.equal(e.item.arguments, '', 'a function_call item opens with empty arguments');
        args.set(e.output_index, '');
      }
    } else if (e.type === 'response.function_call_arguments.delta') {
      assert.equal(e.item_id, open.get(e.output_index).item.id);
      args.set(e.output_index, args.get(e.output_index) + e.delta);
    } else if (e.type === 'response.function_call_arguments.done') {
      assert.equal(e.arguments, args.get(e.output_index), 'arguments.done = the deltas');
    } else if (e.type === 'response.output_item.done') {
      open.get(e.output_index).done = true;
      if (e.item.type === 'function_call') assert.equal(e.item.arguments, args.get(e.output_index));
    }
  }
  for (const [i, a] of args) {
    const done = events.find((e) => e.type === 'response.function_call_arguments.done' && e.output_index === i);
    assert.ok(done, `function_call_arguments.done for item ${i}`);
    assert.equal(done.arguments, a);
  }
  const r = responsesCalls(last.response);
  const streamed = events.filter((e) => e.type === 'response.output_text.delta').map((e) => e.delta).join('');
  assert.equal(streamed, r.content, 'the text deltas are the message');
  if (r.calls.length) assert.ok(!/<tool_/.test(streamed), 'no <tool_ fragment in text');
  return r;
}

export async function messagesCallsStream(stream) {
  const events = [];
  for await (const ev of stream) events.push(ev);
  const blocks = [];
  let cur = null;
  for (const e of events) {
    if (e.type === 'content_block_start') {
      assert.equal(cur, null, 'blocks are sequential');
      cur = { ...e.content_block, json: '' };
      if (cur.type === 'tool_use') {
        assert.deepEqual(e.content_block.input, {}, 'a tool_use block starts with input {}');
        assert.match(cur.id, /^toolu_/);
      }
      assert.equal(e.index, blocks.length);
    } else if (e.type === 'content_block_delta') {
      assert.equal(e.index, blocks.length);
      if (e.delta.type === 'text_delta') cur.text += e.delta.text;
      else if (e.delta.type === 'thinking_delta') cur.thinking += e.delta.thinking;
      else if (e.delta.type === 'input_json_delta') cur.json += e.delta.partial_json;
    } else if (e.type === 'content_block_stop') {
      blocks.push(cur);
      cur = null;
    }
  }
  const md = events.find((e) => e.type === 'message_delta');
  const content = blocks.filter((b) => b.type === 'text').map((b) => b.text).join('');
  const calls = blocks.filter((b) => b.type === 'tool_use').map((b) => ({ id: b.id, name: b.name, arguments: b.json }));
  if (calls.length) assert.ok(!/<tool_/.test(content), 'no <tool_ fragment in text');
  const finish = { tool_use: 'tool_calls', end_turn: 'stop', max_tokens: 'length', stop_sequence: 'stop' }[md.delta.stop_reason];
  return { content, reasoning: blocks.filter((b) => b.type === 'thinking').map((b) => b.thinking).join(''), calls, finish,
           prompt: md.usage.input_tokens + (md.usage.cache_read_input_tokens ?? 0), cached: md.usage.cache_read_input_tokens };
}

// ---- one request through every API and mode -------------------------------

/**
 * conv: { system?, messages: OpenAI chat messages (user text, assistant
 * with tool_calls, tool results) } is converted for each API.
 * opts: { tools, choice ('auto'|'none'|'required'|name), parallel, extra }.
 */
export async function callEverywhere(srv, conv, n, opts = {}) {
  const out = {};
  for (const api of ['chat', 'responses', 'messages'])
    for (const stream of [false, true]) out[`${api}${stream ? ' stream' : ''}`] = await callOne(srv, api, stream, conv, n, opts);
  return out;
}

export async function callOne(srv, api, stream, conv, n, { tools = [], choice, parallel, extra = {}, extraFor = {} } = {}) {
  const more = { ...extra, ...(extraFor[api] ?? {}) };
  if (api === 'chat') {
    const body = { model: MODEL_ID, messages: conv.messages, max_tokens: n, ...more };
    if (conv.system !== undefined) body.messages = [{ role: 'system', content: conv.system }, ...conv.messages];
    if (tools.length) body.tools = chatTools(tools);
    if (choice) body.tool_choice = ['auto', 'none', 'required'].includes(choice) ? choice : { type: 'function', function: { name: choice } };
    if (parallel !== undefined) body.parallel_tool_calls = parallel;
    const oa = openai(srv);
    if (!stream) return chatCalls(await oa.chat.completions.create(body));
    return chatCallsStream(await oa.chat.completions.create({ ...body, stream: true, stream_options: { include_usage: true } }));
  }
  if (api === 'responses') {
    const body = { model: MODEL_ID, input: toResponsesInput(conv.messages), max_output_tokens: n, ...more };
    if (conv.system !== undefined) body.instructions = conv.system;
    if (tools.length) body.tools = respTools(tools);
    if (choice) body.tool_choice = ['auto', 'none', 'required'].includes(choice) ? choice : { type: 'function', name: choice };
    if (parallel !== undefined) body.parallel_tool_calls = parallel;
    const oa = openai(srv);
    if (!stream) return responsesCalls(await oa.responses.create(body));
    return responsesCallsStream(await oa.responses.create({ ...body, stream: true }));
  }
  const body = { model: MODEL_ID, messages: toMessagesInput(conv.messages), max_tokens: n, ...more };
  if (conv.system !== undefined) body.system = conv.system;
  if (tools.length) body.tools = msgTools(tools);
  if (choice) {
    const type = { auto: 'auto', none: 'none', required: 'any' }[choice];
    body.tool_choice = type ? { type } : { type: 'tool', name: choice };
    if (parallel === false) body.tool_choice.disable_parallel_tool_use = true;
  } else if (parallel === false) body.tool_choice = { type: 'auto', disable_parallel_tool_use: true };
  const an = anthropic(srv);
  if (!stream) return messagesCalls(await an.messages.create(body));
  return messagesCallsStream(await an.messages.create({ ...body, stream: true }));
}

const imageOf = (url) => {
  const m = /^data:([^;]+);base64,(.*)$/.exec(url);
  return { mime: m[1], b64: m[2] };
};

function toResponsesInput(messages) {
  const out = [];
  for (const m of messages) {
    if (m.role === 'assistant') {
      if (m.content) out.push({ role: 'assistant', content: m.content });
      for (const c of m.tool_calls ?? [])
        out.push({ type: 'function_call', call_id: c.id, name: c.function.name, arguments: c.function.arguments });
    } else if (m.role === 'tool') {
      const output = typeof m.content === 'string' ? m.content : m.content.map((p) => (p.type === 'text'
        ? { type: 'input_text', text: p.text } : { type: 'input_image', image_url: p.image_url.url }));
      out.push({ type: 'function_call_output', call_id: m.tool_call_id, output });
    } else {
      out.push({ role: m.role, content: typeof m.content === 'string' ? m.content : m.content.map((p) => (p.type === 'text'
        ? { type: 'input_text', text: p.text } : { type: 'input_image', image_url: p.image_url.url })) });
    }
  }
  return out;
}

function toMessagesInput(messages) {
  const out = [];
  for (const m of messages) {
    if (m.role === 'assistant') {
      const content = [];
      if (m.content) content.push({ type: 'text', text: m.content });
      for (const c of m.tool_calls ?? [])
        content.push({ type: 'tool_use', id: c.id, name: c.function.name, input: JSON.parse(c.function.arguments) });
      out.push({ role: 'assistant', content });
    } else if (m.role === 'tool') {
      const block = {
        type: 'tool_result', tool_use_id: m.tool_call_id,
        content: typeof m.content === 'string' ? m.content : m.content.map((p) => (p.type === 'text'
          ? { type: 'text', text: p.text }
          : { type: 'image', source: { type: 'base64', media_type: imageOf(p.image_url.url).mime, data: imageOf(p.image_url.url).b64 } })),
      };
      const prev = out.at(-1);
      if (prev?.role === 'user' && Array.isArray(prev.content) && prev.content.every((b) => b.type === 'tool_result')) prev.content.push(block);
      else out.push({ role: 'user', content: [block] });
    } else {
      out.push({ role: m.role, content: typeof m.content === 'string' ? m.content : m.content.map((p) => (p.type === 'text'
        ? { type: 'text', text: p.text }
        : { type: 'image', source: { type: 'base64', media_type: imageOf(p.image_url.url).mime, data: imageOf(p.image_url.url).b64 } })) });
    }
  }
  return out;
}

// ---- checking arguments against a schema (independent of the server) ------

// An independent JSON Schema validator (ajv, draft 2020-12 with the formats
// checked in full): a constrained answer must validate against its schema.
const ajv = new Ajv2020({ strict: false, allErrors: true });
addFormats(ajv, { mode: 'full' });
export function validate(schema, v) {
  const ok = ajv.validate(schema, v);
  assert.ok(ok, `${JSON.stringify(v)}: ${ajv.errorsText(ajv.errors)}`);
}
