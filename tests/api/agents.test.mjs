// The requests real agent clients send, replayed through the official SDKs
// unchanged: a long system prompt (12k+ tokens) with a dozen tools, the
// fields agents add (stream_options, parallel_tool_calls, prompt_cache_key,
// include reasoning.encrypted_content, cache_control, metadata, and fields
// newer than the server, such as client_metadata), earlier turns with
// reasoning items, a first step that must call, then a second step after
// the tool results (one with a screenshot), history sent back as the server
// answered it. Random weights: only the constraint makes the calls valid.
// Each step must be answered 200, end for its calls with arguments that
// validate against the tool's schema (ajv), and the second step must reuse
// at least 95% of the first one's prompt.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';

import { anthropic, MODEL_ID, openai, picture, startServer, stopServer } from './helpers.mjs';
import {
  chatCallsStream, chatTools, messagesCalls, messagesCallsStream, msgTools, respTools, responsesCalls,
  responsesCallsStream, validate,
} from './tools-helpers.mjs';

// A coding agent's system prompt: its rules, many times over (about 13k tokens).
const RULES = [
  'Read a file before you edit it, and keep its style: indentation, naming, the order of its sections.',
  'Run the tests that cover a change before you say it is done; quote the command and its summary line.',
  'Never print a secret: API keys, tokens and passwords stay out of answers, logs and commit messages.',
  'Prefer the smallest change that solves the problem; say what you left out and why.',
  'When a command fails, read its output, find the cause, and fix that instead of retrying blindly.',
  'Use the grep tool to find where a name is defined before you change how it is called.',
];
const SYSTEM = Array.from({ length: 360 }, (_, i) => `Rule ${i + 1} (section ${1 + (i % 17)}): ${RULES[i % RULES.length]}`)
  .join('\n');

// A dozen tools with the schemas agents declare. Strings carry a maxLength:
// a random model would otherwise write one string until max_tokens.
const str = (maxLength, more = {}) => ({ type: 'string', maxLength, ...more });
const TOOLS = [
  { name: 'read_file', description: 'Read a file of the workspace', parameters: { type: 'object', properties: { path: str(40, { pattern: '^[A-Za-z0-9_./-]+$' }), offset: { type: 'integer', minimum: 0 }, limit: { type: 'integer', minimum: 1, maximum: 2000 } }, required: ['path'], additionalProperties: false } },
  { name: 'write_file', description: 'Write a file', parameters: { type: 'object', properties: { path: str(40), content: str(60) }, required: ['path', 'content'], additionalProperties: false } },
  { name: 'edit_file', description: 'Replace a string in a file', parameters: { type: 'object', properties: { path: str(40), old_string: str(40), new_string: str(40), replace_all: { type: 'boolean' } }, required: ['path', 'old_string', 'new_string'] } },
  { name: 'list_dir', description: 'List a folder', parameters: { type: 'object', properties: { path: str(40), depth: { type: 'integer', enum: [1, 2, 3] } }, required: ['path'] } },
  { name: 'grep', description: 'Search the files', parameters: { type: 'object', properties: { pattern: str(30), glob: str(20), case_insensitive: { type: 'boolean' } }, required: ['pattern'] } },
  { name: 'shell', description: 'Run a shell command', parameters: { type: 'object', properties: { command: { type: 'array', items: str(16), minItems: 1, maxItems: 4 }, timeout_ms: { type: 'integer', minimum: 1000, maximum: 600000 }, workdir: str(40) }, required: ['command'] } },
  { name: 'screenshot', description: 'Take a screenshot of the app', parameters: { type: 'object', properties: { url: str(60, { pattern: '^https?://' }), full_page: { type: 'boolean' } }, required: ['url'] } },
  { name: 'web_search', description: 'Search the web', parameters: { type: 'object', properties: { query: str(40), recency_days: { anyOf: [{ type: 'integer', minimum: 1, maximum: 365 }, { type: 'null' }] } }, required: ['query'] } },
  { name: 'todo_write', description: 'Update the task list', parameters: { type: 'object', properties: { todos: { type: 'array', maxItems: 3, items: { type: 'object', properties: { id: str(8, { pattern: '^[0-9a-f]{1,8}$' }), content: str(30), status: { enum: ['pending', 'in_progress', 'completed'] } }, required: ['id', 'content', 'status'] } } }, required: ['todos'] } },
  { name: 'open_ticket', description: 'Open a ticket', parameters: { type: 'object', properties: { id: { type: 'string', pattern: '^[A-Z]{2,4}-[0-9]{1,5}$' }, due: { type: 'string', format: 'date' }, owner: str(40, { format: 'email' }) }, required: ['id', 'due'] } },
  { name: 'ask_user', description: 'Ask the user a question', parameters: { type: 'object', properties: { question: str(60), options: { type: 'array', items: str(20), maxItems: 4 } }, required: ['question'] } },
  { name: 'task', description: 'Start a sub-agent', parameters: { type: 'object', properties: { description: str(40), prompt: str(60), subagent_type: { enum: ['general', 'explore', 'review'] } }, required: ['description', 'prompt'] } },
];
const SCHEMA = Object.fromEntries(TOOLS.map((t) => [t.name, t.parameters]));
const SHOT = picture('small.png');
const N = 1200;

/* The result an agent sends back for a call: text, and for one call a screenshot. */
const resultText = (c) => `${c.name} ok: ${c.arguments.length} bytes of arguments read`;

function checkCalls(r, what) {
  assert.equal(r.finish, 'tool_calls', `${what}: ends for its calls`);
  assert.ok(r.calls.length >= 1, `${what}: a call`);
  assert.equal(r.content, '', `${what}: nothing but the calls`);
  for (const c of r.calls) {
    assert.ok(c.name in SCHEMA, `${what}: a declared tool (${c.name})`);
    validate(SCHEMA[c.name], JSON.parse(c.arguments));
  }
}

const reuse = (r1, r2, what) => assert.ok(r2.cached >= 0.95 * r1.prompt,
  `${what}: the second step reuses ${r2.cached} of the first one's ${r1.prompt} prompt tokens (95% at least)`);

// Chat Completions, as a coding agent on the OpenAI client sends it.
async function chatAgent(srv, stream, seed) {
  const oa = openai(srv);
  const messages = [{ role: 'system', content: SYSTEM }, { role: 'user', content: 'The build fails in src/net.c; find out why.' }];
  const body = (tool_choice) => ({
    model: MODEL_ID, messages, tools: chatTools(TOOLS).map((t) => ({ ...t, function: { ...t.function, strict: false } })),
    tool_choice, parallel_tool_calls: true, max_completion_tokens: N, temperature: 1, seed, user: 'dev-1',
    prompt_cache_key: 'session-42', store: false, metadata: { agent: 'replay' },
    client_metadata: { session: 'abc', turn: messages.length }, // newer than the server: ignored, named in a header
    ...(stream ? { stream: true, stream_options: { include_usage: true } } : {}),
  });
  const collect = async (b) => {
    const { data, response } = await oa.chat.completions.create(b).withResponse();
    assert.equal(response.status, 200);
    assert.match(response.headers.get('x-pinhole-ignored-fields') ?? '', /client_metadata/);
    if (stream) return chatCallsStream(data);
    const c = data.choices[0];
    return { content: c.message.content ?? '', calls: (c.message.tool_calls ?? []).map((t) => ({ id: t.id, name: t.function.name, arguments: t.function.arguments })),
             finish: c.finish_reason, prompt: data.usage.prompt_tokens, cached: data.usage.prompt_tokens_details.cached_tokens };
  };
  const r1 = await collect(body('required'));
  checkCalls(r1, 'chat step 1');
  assert.ok(r1.prompt > 12000, `a long system prompt (${r1.prompt} tokens)`);
  messages.push({ role: 'assistant', content: null,
    tool_calls: r1.calls.map((c) => ({ id: c.id, type: 'function', function: { name: c.name, arguments: c.arguments } })) });
  r1.calls.forEach((c, i) => messages.push({ role: 'tool', tool_call_id: c.id, content: i === 0
    ? [{ type: 'text', text: resultText(c) }, { type: 'image_url', image_url: { url: SHOT.url } }] : resultText(c) }));
  const r2 = await collect(body('required'));
  checkCalls(r2, 'chat step 2');
  reuse(r1, r2, 'chat');
}

// Responses, as a coding agent that keeps no state on the server sends it:
// store false, the reasoning of earlier turns sent back, the output items
// of each step sent back as they came.
async function responsesAgent(srv, stream, seed) {
  const oa = openai(srv);
  const input = [
    { type: 'message', role: 'user', content: [{ type: 'input_text', text: 'What does src/net.c do?' }] },
    { type: 'reasoning', id: 'rs_prev', summary: [{ type: 'summary_text', text: 'Read it first.' }], encrypted_content: null },
    { type: 'message', role: 'assistant', id: 'msg_prev', status: 'completed', content: [{ type: 'output_text', text: 'It opens sockets.', annotations: [] }] },
    { type: 'message', role: 'user', content: [{ type: 'input_text', text: 'The build fails there; find out why.' }] },
  ];
  const body = () => ({
    model: MODEL_ID, instructions: SYSTEM, input, tools: respTools(TOOLS).map((t) => ({ ...t, strict: false })),
    tool_choice: 'required', parallel_tool_calls: true, max_output_tokens: N, temperature: 1, seed, store: false,
    include: ['reasoning.encrypted_content'], reasoning: { effort: 'medium', summary: 'auto' }, prompt_cache_key: 'session-43',
    text: { verbosity: 'medium' }, client_metadata: { session: 'abc' }, ...(stream ? { stream: true } : {}),
  });
  const step = async () => {
    const { data, response } = await oa.responses.create(body()).withResponse();
    assert.equal(response.status, 200);
    assert.match(response.headers.get('x-pinhole-ignored-fields') ?? '', /client_metadata/);
    if (!stream) return { r: responsesCalls(data), output: data.output };
    const events = [];
    for await (const e of data) events.push(e);
    const r = await responsesCallsStream((async function* () { yield* events; })());
    return { r, output: events.at(-1).response.output };
  };
  const s1 = await step();
  checkCalls(s1.r, 'responses step 1');
  input.push(...s1.output);
  s1.r.calls.forEach((c, i) => input.push({ type: 'function_call_output', call_id: c.id, output: i === 0
    ? [{ type: 'input_text', text: resultText(c) }, { type: 'input_image', image_url: SHOT.url, detail: 'auto' }] : resultText(c) }));
  const s2 = await step();
  checkCalls(s2.r, 'responses step 2');
  reuse(s1.r, s2.r, 'responses');
}

// Messages, as a coding agent on the Anthropic client sends it: system
// blocks with cache_control, metadata.user_id, thinking off, tool_choice any.
async function messagesAgent(srv, stream, seed) {
  const an = anthropic(srv);
  const messages = [{ role: 'user', content: [{ type: 'text', text: 'The build fails in src/net.c; find out why.', cache_control: { type: 'ephemeral' } }] }];
  const tools = msgTools(TOOLS);
  tools[tools.length - 1].cache_control = { type: 'ephemeral' };
  const body = () => ({
    model: MODEL_ID, max_tokens: N, temperature: 1, seed, stream,
    system: [{ type: 'text', text: 'You are a coding agent.' }, { type: 'text', text: SYSTEM, cache_control: { type: 'ephemeral' } }],
    messages, tools, tool_choice: { type: 'any' }, metadata: { user_id: 'user_abc_session_44' },
    thinking: { type: 'disabled' }, client_metadata: { session: 'abc' },
  });
  const step = async () => {
    const { data, response } = await an.messages.create(body()).withResponse();
    assert.equal(response.status, 200);
    assert.match(response.headers.get('x-pinhole-ignored-fields') ?? '', /client_metadata/);
    return stream ? messagesCallsStream(data) : messagesCalls(data);
  };
  const r1 = await step();
  checkCalls(r1, 'messages step 1');
  messages.push({ role: 'assistant', content: r1.calls.map((c) => ({ type: 'tool_use', id: c.id, name: c.name, input: JSON.parse(c.arguments) })) });
  messages.push({ role: 'user', content: r1.calls.map((c, i) => ({ type: 'tool_result', tool_use_id: c.id, content: i === 0
    ? [{ type: 'text', text: resultText(c) }, { type: 'image', source: { type: 'base64', media_type: SHOT.mime, data: SHOT.b64 } }]
    : resultText(c) })) });
  const r2 = await step();
  checkCalls(r2, 'messages step 2');
  reuse(r1, r2, 'messages');
}

describe('agent clients, unchanged', { timeout: 900_000 }, () => {
  let srv;
  before(async () => { srv = await startServer({ vision: true, extra: ['-c', '16384'] }); });
  after(async () => { await stopServer(srv); });

  for (const stream of [false, true]) {
    const how = stream ? 'streamed' : 'not streamed';
    test(`Chat Completions (${how}): a long prompt, 12 tools, calls, a screenshot result, the second step`, async () => {
      for (const seed of [1, 2]) await chatAgent(srv, stream, seed);
    });
    test(`Responses (${how}): store false, reasoning items and output items sent back`, async () => {
      for (const seed of [1, 2]) await responsesAgent(srv, stream, seed);
    });
    test(`Messages (${how}): system blocks with cache_control, tool_choice any, tool results with a picture`, async () => {
      for (const seed of [1, 2]) await messagesAgent(srv, stream, seed);
    });
  }
});
