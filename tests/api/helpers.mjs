// Shared by the API tests: starting and stopping `pinhole serve`, the
// official clients pointed at it, one conversation in each API's shape, the
// reference answer from `pinhole run`, error and metrics checks.
//
// Environment: PINHOLE_BIN (the pinhole binary), PINHOLE_TEST_BIN (pinhole-test)
// and PH_ORACLE_DIR (the oracle folder the build makes: models/ and img/);
// ctest sets them.
import assert from 'node:assert/strict';
import { execFile, spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';

const HERE = fileURLToPath(new URL('.', import.meta.url));

// The clients are imported here, dynamically, so that a missing install
// fails every test file with a message that says what to do.
for (const pkg of ['openai', '@anthropic-ai/sdk']) {
  if (!existsSync(join(HERE, 'node_modules', pkg, 'package.json'))) {
    throw new Error(`the API test clients are not installed (node_modules/${pkg} is missing): ` +
                    `run \`npm ci\` in ${HERE}`);
  }
}
export const OpenAI = (await import('openai')).default;
export const Anthropic = (await import('@anthropic-ai/sdk')).default;

function required(name, hint) {
  const v = process.env[name];
  if (!v) throw new Error(`${name} is not set: ${hint}`);
  return v;
}

export const BIN = required('PINHOLE_BIN', 'point it at the pinhole binary (ctest sets it)');
// pinhole-test: the same program with the test hooks on (PINHOLE_TEST_*
// delays and faults, src/base/test_hook.h); the shipped pinhole ignores them.
export const TEST_BIN = required('PINHOLE_TEST_BIN', 'point it at the pinhole-test binary (ctest sets it)');
export const ORACLE = process.env.PH_ORACLE_DIR || join(HERE, '..', '..', 'build', 'testdata', 'oracle');
export const MODEL = join(ORACLE, 'models', 'tiny-f16.gguf');
export const MMPROJ = join(ORACLE, 'models', 'tiny-f16-mmproj.gguf');
export const MODEL_ID = 'tiny-f16';
// The model pairs a server can be started with (startServer's model): the
// Qwen3-VL one above, which every test uses unless it says otherwise, and
// oracle/qwen35's tiny Qwen3.5 pair. recurrent: the model has recurrent
// layers, whose state is reused only at snapshots of it (docs/server.md, "How reuse
// works"); opener: the rows of the answer's opener ("<think>\n": <think>
// is one token of its vocabulary, the newline another), which a re-sent
// history does not have.
export const QWEN3VL = { llm: MODEL, mmproj: MMPROJ, id: MODEL_ID, recurrent: false, opener: 0 };
export const QWEN35 = {
  llm: join(ORACLE, 'qwen35', 'models', 'tiny.gguf'), mmproj: join(ORACLE, 'qwen35', 'models', 'tiny-mmproj.gguf'),
  id: 'tiny', recurrent: true, opener: 2,
};
for (const f of [BIN, MODEL, MMPROJ, QWEN35.llm, QWEN35.mmproj]) {
  if (!existsSync(f)) throw new Error(`${f} does not exist (PINHOLE_BIN / PH_ORACLE_DIR)`);
}
// Whether BIN is the AddressSanitizer build (-DPH_SANITIZE=ON): its shadow
// memory and its quarantine of freed blocks make memory figures its own.
export const SANITIZED = readFileSync(BIN).includes('__asan_init');

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// ---- the server ---------------------------------------------------------

const live = new Set();
process.on('exit', () => { for (const p of live) p.kill('SIGKILL'); });

// Where the servers keep their file-id memo: a folder of this test process.
let cacheHome = null;
function cacheDir() {
  if (!cacheHome) {
    cacheHome = mkdtempSync(join(tmpdir(), 'pinhole-api-'));
    process.on('exit', () => rmSync(cacheHome, { recursive: true, force: true }));
  }
  return cacheHome;
}

/**
 * Starts `pinhole serve` on a free port and waits (60 s at most) for its
 * "pinhole: listening on http://127.0.0.1:PORT" line on stderr (or its
 * json line's "msg").
 * model: QWEN3VL (default) or QWEN35, or a string that -m takes as it is
 * (a folder, or a pulled hub reference); vision: pass the model's --mmproj
 * (true; for a string, none is passed: its vision file is looked for or
 * pulled with it), --no-mmproj (false: text only), or neither (null: the
 * vision file is looked for beside the model); extra: more arguments
 * (--max-images 2, -c 128 ...); env: more environment variables
 * (PINHOLE_API_KEY ...).
 */
export async function startServer({ model = QWEN3VL, vision = true, extra = [], env = {}, bin = BIN } = {}) {
  const named = typeof model === 'string';
  const visionArgs = vision === false ? ['--no-mmproj'] : vision && !named ? ['--mmproj', model.mmproj] : [];
  const args = ['serve', '-m', named ? model : model.llm, ...visionArgs, '--port', '0', '-t', '2', ...extra];
  const inherited = { ...process.env };
  delete inherited.PINHOLE_API_KEY; // a key of the caller's shell would lock every test out
  const proc = spawn(bin, args, {
    stdio: ['ignore', 'pipe', 'pipe'],
    env: { ...inherited, XDG_CACHE_HOME: cacheDir(), ...env },
  });
  live.add(proc);
  let stderr = '';
  proc.stdout.resume(); // never let a full pipe block it
  proc.stderr.setEncoding('utf8');
  proc.stderr.on('data', (d) => { stderr += d; });
  let exit = null;
  const exited = new Promise((resolve) => {
    proc.on('exit', (code, signal) => { exit = { code, signal }; live.delete(proc); resolve(exit); });
  });
  const cmd = `${bin} ${args.join(' ')}`;
  const port = await new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      proc.kill('SIGKILL');
      reject(new Error(`${cmd}: no "listening" line within 60 s; stderr:\n${stderr}`));
    }, 60_000);
    const look = () => {
      // the text line, or the json one (--log-format json)
      const m = /(?:pinhole: |"msg":")listening on http:\/\/127\.0\.0\.1:(\d+)/.exec(stderr);
      if (m) { clearTimeout(timer); resolve(Number(m[1])); }
    };
    proc.stderr.on('data', look);
    proc.on('error', (e) => { clearTimeout(timer); reject(new Error(`cannot start ${bin}: ${e.message}`)); });
    exited.then(({ code, signal }) => {
      clearTimeout(timer);
      reject(new Error(`${cmd} exited (${signal ?? code}) before listening; stderr:\n${stderr}`));
    });
  });
  const url = `http://127.0.0.1:${port}`;
  return {
    port, url, proc, args, model,
    get stderr() { return stderr; },
    get exit() { return exit; },
    /** Sends signal and waits for the exit: {code, signal}. */
    async stop(signal = 'SIGTERM', timeoutMs = 30_000) {
      if (exit) return exit;
      proc.kill(signal);
      let timer;
      const r = await Promise.race([exited, new Promise((res) => { timer = setTimeout(res, timeoutMs, null); })]);
      clearTimeout(timer);
      if (r) return r;
      proc.kill('SIGKILL');
      await exited;
      throw new Error(`pinhole serve did not stop within ${timeoutMs / 1000} s of ${signal}; stderr:\n${stderr}`);
    },
  };
}

/** Stops a server with SIGTERM and checks that it exited cleanly (status 0). */
export async function stopServer(srv, signal = 'SIGTERM') {
  if (!srv) return;
  const wasRunning = !srv.exit;
  const r = await srv.stop(signal);
  assert.ok(wasRunning, `pinhole serve had already exited (${r.signal ?? r.code}); stderr:\n${srv.stderr}`);
  assert.deepEqual(r, { code: 0, signal: null }, `pinhole serve did not exit cleanly on ${signal}; stderr:\n${srv.stderr}`);
}

/** Runs fn(srv) on a server of its own (startServer options), then stops it cleanly. */
export async function withServer(opts, fn) {
  const srv = await startServer(opts);
  try {
    await fn(srv);
  } catch (e) {
    if (srv.exit) e.message += `\n(pinhole serve exited: ${srv.exit.signal ?? srv.exit.code}; stderr:\n${srv.stderr})`;
    await srv.stop().catch(() => {});
    throw e;
  }
  await stopServer(srv);
}

// ---- clients ------------------------------------------------------------

export function openai(srv, { apiKey = 'unused' } = {}) {
  return new OpenAI({ apiKey, baseURL: `${srv.url}/v1`, maxRetries: 0, timeout: 300_000 });
}

export function anthropic(srv, { apiKey = 'unused' } = {}) {
  return new Anthropic({ apiKey, baseURL: srv.url, maxRetries: 0, timeout: 300_000 });
}

// ---- pictures -----------------------------------------------------------

const MIME = { png: 'image/png', jpg: 'image/jpeg', jpeg: 'image/jpeg', webp: 'image/webp', gif: 'image/gif' };

export function imgPath(name) { return join(ORACLE, 'img', name); }

/** {name, mime, b64, url} of a picture of the oracle (or bytes given). */
export function picture(name, bytes = null) {
  const data = bytes ?? readFileSync(imgPath(name));
  const mime = MIME[name.split('.').pop()];
  const b64 = Buffer.from(data).toString('base64');
  return { name, mime, b64, url: `data:${mime};base64,${b64}` };
}

// ---- one conversation in every shape ------------------------------------
// A conversation: { system?, turns: [{ role: 'user'|'assistant', parts: [{text} | {image: name}] }] }.
// Helpers below render it for each API and as the raw ChatML prompt of
// `pinhole run` (DESIGN 9: the same conversation is the same prompt).

export const user = (...parts) => ({ role: 'user', parts: parts.map(part) });
export const assistant = (text) => ({ role: 'assistant', parts: [{ text }] });
function part(p) { return typeof p === 'string' ? { text: p } : p; }
export const img = (name) => ({ image: name });

const onlyText = (parts) => parts.length === 1 && parts[0].text !== undefined;

export function toChat(conv, { systemRole = 'system' } = {}) {
  const messages = [];
  if (conv.system !== undefined) messages.push({ role: systemRole, content: conv.system });
  for (const t of conv.turns) {
    if (onlyText(t.parts)) { messages.push({ role: t.role, content: t.parts[0].text }); continue; }
    messages.push({
      role: t.role,
      content: t.parts.map((p) => (p.text !== undefined
        ? { type: 'text', text: p.text }
        : { type: 'image_url', image_url: { url: picture(p.image).url } })),
    });
  }
  return messages;
}

export function toResponses(conv) {
  const out = {};
  if (conv.system !== undefined) out.instructions = conv.system;
  if (conv.turns.length === 1 && onlyText(conv.turns[0].parts)) {
    out.input = conv.turns[0].parts[0].text;
    return out;
  }
  out.input = conv.turns.map((t) => {
    if (t.role === 'assistant') return { role: 'assistant', content: t.parts[0].text };
    return {
      type: 'message',
      role: 'user',
      content: t.parts.map((p) => (p.text !== undefined
        ? { type: 'input_text', text: p.text }
        : { type: 'input_image', image_url: picture(p.image).url, detail: 'auto' })),
    };
  });
  return out;
}

export function toMessages(conv) {
  const out = {};
  if (conv.system !== undefined) out.system = conv.system;
  out.messages = conv.turns.map((t) => {
    if (onlyText(t.parts)) return { role: t.role, content: t.parts[0].text };
    return {
      role: t.role,
      content: t.parts.map((p) => {
        if (p.text !== undefined) return { type: 'text', text: p.text };
        const pic = picture(p.image);
        return { type: 'image', source: { type: 'base64', media_type: pic.mime, data: pic.b64 } };
      }),
    };
  });
  return out;
}

export function toRaw(conv) {
  if (conv.raw !== undefined) return { prompt: conv.raw, images: conv.images ?? [] }; // a prompt rendered by the caller
  let prompt = '';
  const images = [];
  if (conv.system !== undefined) prompt += `<|im_start|>system\n${conv.system}<|im_end|>\n`;
  for (const t of conv.turns) {
    prompt += `<|im_start|>${t.role}\n`;
    for (const p of t.parts) {
      if (p.text !== undefined) prompt += p.text;
      else { prompt += '<__image__>'; images.push(p.image); }
    }
    prompt += '<|im_end|>\n';
  }
  prompt += '<|im_start|>assistant\n';
  return { prompt, images };
}

// ---- the reference: pinhole run ----------------------------------------

const execFileP = promisify(execFile);
// End-of-generation tokens `pinhole run` prints (as their text) when it stops on one.
const EOG_TEXTS = ['<|im_end|>', '<|endoftext|>', '<|eot_id|>', '<|end|>', '<|eom_id|>', '</s>', '<eos>', '<end_of_turn>'];

/**
 * The greedy answer of `pinhole run` to conv, with n tokens at most:
 * { text, stopped (an end token ended it), nTokens (generated, without the end token) }.
 */
export async function reference(conv, n) {
  const { prompt, images } = toRaw(conv);
  const base = ['run', '-m', MODEL];
  if (images.length) base.push('--mmproj', MMPROJ, ...images.flatMap((f) => ['--image', imgPath(f)]));
  base.push('--raw', prompt, '-n', String(n), '--temp', '0', '-t', '2');
  const opts = { maxBuffer: 64 << 20, env: { ...process.env, XDG_CACHE_HOME: cacheDir() } };
  const txt = await execFileP(BIN, base, { ...opts, encoding: 'buffer' });
  let text = txt.stdout.toString('utf8');
  assert.ok(text.endsWith('\n'), `pinhole run output does not end with a newline: ${JSON.stringify(text)}`);
  text = text.slice(0, -1);
  const eog = EOG_TEXTS.find((t) => text.endsWith(t));
  if (eog) text = text.slice(0, -eog.length);
  const js = JSON.parse((await execFileP(BIN, [...base, '--json'], opts)).stdout);
  const stopped = Boolean(eog);
  assert.ok(stopped ? js.generated.length <= n : js.generated.length === n,
            `pinhole run --json generated ${js.generated.length} tokens (-n ${n}, stopped: ${stopped})`);
  return { text, stopped, nTokens: js.generated.length - (stopped ? 1 : 0) };
}

// ---- collecting answers -------------------------------------------------

/** Runs one conversation through every endpoint and mode: { name: {text, ...} }. */
export async function askEverywhere(srv, conv, n, extra = {}) {
  const oa = openai(srv);
  const an = anthropic(srv);
  const out = {};
  out['chat'] = chatResult(await oa.chat.completions.create({ model: MODEL_ID, messages: toChat(conv), max_tokens: n, temperature: 0, ...extra }));
  out['chat stream'] = await chatStream(await oa.chat.completions.create({
    model: MODEL_ID, messages: toChat(conv), max_tokens: n, temperature: 0, stream: true,
    stream_options: { include_usage: true }, ...extra,
  }));
  out['responses'] = responsesResult(await oa.responses.create({ model: MODEL_ID, ...toResponses(conv), max_output_tokens: n, temperature: 0 }));
  out['responses stream'] = await responsesStream(await oa.responses.create({
    model: MODEL_ID, ...toResponses(conv), max_output_tokens: n, temperature: 0, stream: true,
  }));
  out['messages'] = messagesResult(await an.messages.create({ model: MODEL_ID, ...toMessages(conv), max_tokens: n, temperature: 0 }));
  out['messages stream'] = await messagesStream(await an.messages.create({
    model: MODEL_ID, ...toMessages(conv), max_tokens: n, temperature: 0, stream: true,
  }));
  return out;
}

// Each result: { text, finish ('stop'|'length'), prompt, completion, cached }.

export function chatResult(r) {
  assert.equal(r.object, 'chat.completion');
  assert.equal(typeof r.id, 'string');
  assert.equal(typeof r.created, 'number');
  assert.equal(typeof r.model, 'string');
  assert.equal(r.choices.length, 1);
  const c = r.choices[0];
  assert.equal(c.index, 0);
  assert.equal(c.message.role, 'assistant');
  assert.equal(typeof c.message.content, 'string');
  assert.ok(['stop', 'length'].includes(c.finish_reason), `finish_reason ${c.finish_reason}`);
  const u = r.usage;
  assert.equal(u.total_tokens, u.prompt_tokens + u.completion_tokens, 'total_tokens = prompt + completion');
  assert.equal(typeof u.prompt_tokens_details?.cached_tokens, 'number', 'usage.prompt_tokens_details.cached_tokens');
  return { text: c.message.content, finish: c.finish_reason, prompt: u.prompt_tokens, completion: u.completion_tokens,
           cached: u.prompt_tokens_details.cached_tokens, raw: r };
}

export async function chatStream(stream) {
  let text = '';
  let finish = null;
  let usage = null;
  let n = 0;
  let id = null;
  for await (const ch of stream) {
    n++;
    assert.equal(ch.object, 'chat.completion.chunk');
    id ??= ch.id;
    assert.equal(ch.id, id, 'every chunk has the same id');
    assert.equal(usage, null, 'the usage chunk is the last one');
    if (ch.usage) {
      usage = ch.usage;
      assert.deepEqual(ch.choices, [], 'the usage chunk has no choices');
      continue;
    }
    assert.equal(ch.choices.length, 1);
    const c = ch.choices[0];
    if (n === 1) assert.equal(c.delta?.role, 'assistant', 'the first chunk names the role');
    assert.equal(finish, null, 'no choice after the one with finish_reason');
    if (typeof c.delta?.content === 'string') text += c.delta.content;
    if (c.finish_reason) finish = c.finish_reason;
  }
  assert.ok(n >= 2, 'at least a delta and the usage chunk');
  assert.ok(['stop', 'length'].includes(finish), `finish_reason ${finish}`);
  assert.ok(usage, 'stream_options.include_usage gives a usage chunk');
  assert.equal(usage.total_tokens, usage.prompt_tokens + usage.completion_tokens);
  return { text, finish, prompt: usage.prompt_tokens, completion: usage.completion_tokens,
           cached: usage.prompt_tokens_details?.cached_tokens };
}

function responseText(r) {
  const msgs = r.output.filter((o) => o.type === 'message');
  assert.equal(msgs.length, 1, 'one message in output');
  assert.equal(msgs[0].role, 'assistant');
  return msgs[0].content.filter((c) => c.type === 'output_text').map((c) => c.text).join('');
}

// A response that hit max_output_tokens is "incomplete" in the official API;
// "completed" is accepted too. One that ended by itself is "completed".
export function responsesResult(r, { sdk = true } = {}) {
  assert.equal(r.object, 'response');
  assert.equal(typeof r.id, 'string');
  assert.ok(['completed', 'incomplete'].includes(r.status), `status ${r.status}`);
  const text = responseText(r);
  if (sdk) assert.equal(r.output_text, text, 'SDK output_text');
  const u = r.usage;
  assert.equal(u.total_tokens, u.input_tokens + u.output_tokens, 'total_tokens = input + output');
  let finish = r.status === 'completed' ? 'stop' : 'length';
  if (r.status === 'incomplete') assert.equal(r.incomplete_details?.reason, 'max_output_tokens');
  return { text, finish, status: r.status, prompt: u.input_tokens, completion: u.output_tokens,
           cached: u.input_tokens_details?.cached_tokens, raw: r };
}

const RESPONSE_EVENTS = ['response.created', 'response.in_progress', 'response.output_item.added',
  'response.content_part.added', 'response.output_text.delta', 'response.output_text.done',
  'response.content_part.done', 'response.output_item.done'];

export async function responsesStream(stream) {
  const events = [];
  for await (const ev of stream) events.push(ev);
  const types = events.map((e) => e.type);
  const last = events.at(-1);
  assert.ok(['response.completed', 'response.incomplete'].includes(last?.type), `last event ${last?.type}`);
  // created, in_progress, item added, part added, delta*, text done, part done, item done, completed
  const body = types.slice(0, -1).filter((t) => t !== 'response.output_text.delta');
  assert.deepEqual(body, RESPONSE_EVENTS.filter((t) => t !== 'response.output_text.delta'), `event order: ${types.join(' ')}`);
  const firstDelta = types.indexOf('response.output_text.delta');
  if (firstDelta >= 0) {
    assert.ok(firstDelta > types.indexOf('response.content_part.added') && types.lastIndexOf('response.output_text.delta') < types.indexOf('response.output_text.done'),
              `deltas between content_part.added and output_text.done: ${types.join(' ')}`);
  }
  for (let i = 1; i < events.length; i++) {
    assert.ok(events[i].sequence_number > events[i - 1].sequence_number, 'sequence_number increases');
  }
  const ev = (t) => events.find((e) => e.type === t);
  assert.equal(ev('response.created').response.status, 'in_progress');
  const item = ev('response.output_item.added').item;
  assert.equal(item.type, 'message');
  assert.equal(item.role, 'assistant');
  let text = '';
  for (const e of events.filter((x) => x.type === 'response.output_text.delta')) {
    assert.equal(e.item_id, item.id, 'delta item_id');
    assert.equal(e.output_index, 0);
    assert.equal(e.content_index, 0);
    text += e.delta;
  }
  assert.equal(ev('response.output_text.done').text, text, 'output_text.done text = the deltas');
  assert.equal(ev('response.content_part.done').part.text, text, 'content_part.done text');
  const r = responsesResult(last.response, { sdk: false });
  assert.equal(last.type, `response.${r.status}`, 'the last event names the status');
  assert.equal(r.text, text, 'final response text = the deltas');
  return { ...r, text };
}

export function messagesResult(r) {
  assert.equal(r.type, 'message');
  assert.equal(r.role, 'assistant');
  assert.equal(typeof r.id, 'string');
  assert.ok(['end_turn', 'max_tokens', 'stop_sequence'].includes(r.stop_reason), `stop_reason ${r.stop_reason}`);
  const text = r.content.filter((b) => b.type === 'text').map((b) => b.text).join('');
  if (r.stop_reason !== 'stop_sequence') assert.equal(r.stop_sequence, null, 'stop_sequence');
  const u = r.usage;
  assert.equal(typeof u.input_tokens, 'number');
  assert.equal(typeof u.output_tokens, 'number');
  assert.equal(typeof u.cache_read_input_tokens, 'number', 'usage.cache_read_input_tokens');
  // Anthropic's input_tokens leaves out the tokens read from the cache.
  const prompt = u.input_tokens + u.cache_read_input_tokens + (u.cache_creation_input_tokens ?? 0);
  return { text, finish: r.stop_reason === 'max_tokens' ? 'length' : 'stop', stopReason: r.stop_reason,
           stopSequence: r.stop_sequence, prompt, completion: u.output_tokens, cached: u.cache_read_input_tokens, raw: r };
}

export async function messagesStream(stream) {
  const events = [];
  for await (const ev of stream) events.push(ev);
  const types = events.map((e) => e.type);
  // message_start, then per content block: start, delta*, stop; then message_delta, message_stop
  const order = types.filter((t) => t !== 'content_block_delta').join(' ');
  assert.match(order, /^message_start( content_block_start content_block_stop)* message_delta message_stop$/,
               `event order: ${types.join(' ')}`);
  let open = false;
  for (const t of types) {
    if (t === 'content_block_start') open = true;
    if (t === 'content_block_stop') open = false;
    if (t === 'content_block_delta') assert.ok(open, `a delta outside a content block: ${types.join(' ')}`);
  }
  const start = events[0].message;
  assert.equal(start.type, 'message');
  assert.equal(start.role, 'assistant');
  assert.deepEqual(start.content, []);
  assert.equal(typeof start.usage.input_tokens, 'number');
  let text = '';
  for (const e of events) {
    if (e.type === 'content_block_start') assert.equal(e.content_block.type, 'text');
    if (e.type === 'content_block_delta') {
      assert.equal(e.delta.type, 'text_delta');
      text += e.delta.text;
    }
  }
  const md = events.find((e) => e.type === 'message_delta');
  assert.ok(['end_turn', 'max_tokens', 'stop_sequence'].includes(md.delta.stop_reason), `stop_reason ${md.delta.stop_reason}`);
  assert.equal(typeof md.usage.output_tokens, 'number');
  const u = start.usage;
  const prompt = (md.usage.input_tokens ?? u.input_tokens) + (md.usage.cache_read_input_tokens ?? u.cache_read_input_tokens ?? 0) +
                 (md.usage.cache_creation_input_tokens ?? u.cache_creation_input_tokens ?? 0);
  return { text, finish: md.delta.stop_reason === 'max_tokens' ? 'length' : 'stop', stopReason: md.delta.stop_reason,
           stopSequence: md.delta.stop_sequence, prompt, completion: md.usage.output_tokens,
           cached: md.usage.cache_read_input_tokens ?? u.cache_read_input_tokens };
}

// ---- errors -------------------------------------------------------------

// The error bodies: OpenAI {"error":{"message","type","param","code"}},
// Anthropic {"type":"error","error":{"type","message"}}.
export function checkOpenAIErrorBody(body, re = /./) {
  const e = body?.error;
  assert.equal(typeof e?.message, 'string', `OpenAI error body {"error":{"message",...}}: ${JSON.stringify(body)}`);
  assert.ok(e.message.length > 0, 'a message');
  assert.match(e.message, re);
  assert.equal(typeof e.type, 'string', 'error.type');
  assert.ok('param' in e && 'code' in e, `error.param and error.code: ${JSON.stringify(body)}`);
}

export function checkAnthropicErrorBody(body, type, re = /./) {
  assert.equal(body?.type, 'error', `Anthropic error body {"type":"error","error":{...}}: ${JSON.stringify(body)}`);
  assert.equal(body.error?.type, type, 'error.type');
  assert.equal(typeof body.error.message, 'string');
  assert.ok(body.error.message.length > 0, 'a message');
  assert.match(body.error.message, re);
}

async function apiError(promise, cls, status) {
  let err = null;
  try { await promise; } catch (e) { err = e; }
  assert.ok(err, `expected HTTP ${status}, the request succeeded`);
  assert.ok(err instanceof cls, `expected an APIError, got ${err}`);
  const cause = err.cause?.code ?? err.cause?.cause?.code ?? err.cause?.message ?? '';
  assert.equal(err.status, status, err.status === undefined ? `no HTTP status: ${err.message} ${cause}` : `status (${err.message})`);
  return err;
}

/** Awaits a call that must fail with an OpenAI API error: status, message matching re. */
export async function openaiError(promise, status, re = /./) {
  const err = await apiError(promise, OpenAI.APIError, status);
  checkOpenAIErrorBody({ error: err.error }, re);
  return err;
}

/** Awaits a call that must fail with an Anthropic API error: status, error type, message matching re. */
export async function anthropicError(promise, status, type, re = /./) {
  const err = await apiError(promise, Anthropic.APIError, status);
  checkAnthropicErrorBody(err.error, type, re);
  return err;
}

// ---- raw HTTP ------------------------------------------------------------

export async function get(srv, path, headers = {}) {
  const r = await fetch(srv.url + path, { headers });
  return { status: r.status, type: r.headers.get('content-type') ?? '', text: await r.text() };
}

export async function post(srv, path, body, headers = {}) {
  const r = await fetch(srv.url + path, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: typeof body === 'string' ? body : JSON.stringify(body),
  });
  const text = await r.text();
  let json = null;
  try { json = JSON.parse(text); } catch { /* not JSON */ }
  return { status: r.status, type: r.headers.get('content-type') ?? '', headers: r.headers, text, json };
}

// ---- metrics --------------------------------------------------------------

/** Parses Prometheus text: [{name, labels, value}]. */
export function parseMetrics(text) {
  const out = [];
  for (const line of text.split('\n')) {
    if (!line.trim() || line.startsWith('#')) continue;
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)(?:\s+\d+)?$/.exec(line);
    assert.ok(m, `not a Prometheus sample line: ${JSON.stringify(line)}`);
    const labels = {};
    if (m[2]) {
      for (const l of m[2].matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g)) labels[l[1]] = l[2];
    }
    const value = m[3] === '+Inf' ? Infinity : m[3] === '-Inf' ? -Infinity : Number(m[3]);
    assert.ok(!Number.isNaN(value) || m[3] === 'NaN', `bad value in ${JSON.stringify(line)}`);
    out.push({ name: m[1], labels, value });
  }
  return out;
}

/** The samples of /metrics (headers: an API key's, say). */
export async function metrics(srv, headers = {}) {
  const r = await get(srv, '/metrics', headers);
  assert.equal(r.status, 200);
  return parseMetrics(r.text);
}

/** The sum of the samples called name whose labels include labels; undefined if none. */
export function metric(samples, name, labels = {}) {
  const hits = samples.filter((s) => s.name === name && Object.entries(labels).every(([k, v]) => s.labels[k] === v));
  if (!hits.length) return undefined;
  return hits.reduce((a, s) => a + s.value, 0);
}

/** Polls /metrics every intervalMs until pred(samples) holds (timeoutMs at most); returns the samples. */
export async function waitMetrics(srv, pred, timeoutMs = 30_000, intervalMs = 100) {
  const t0 = Date.now();
  for (;;) {
    const s = await metrics(srv);
    if (pred(s)) return s;
    if (Date.now() - t0 > timeoutMs) return s;
    await sleep(intervalMs);
  }
}

// ---- reuse: a warm server's turn against a cold one's ----------------------

const ASK_TOKENS = 6;

export const COUNTERS = {
  encoded: 'pinhole_images_encoded_total', hits: 'pinhole_image_cache_hits_total', misses: 'pinhole_image_cache_misses_total',
  evictions: 'pinhole_image_cache_evictions_total', loads: 'pinhole_encoder_loads_total',
  unloads: 'pinhole_encoder_unloads_total', reused: 'pinhole_prompt_tokens_reused_total',
  ram: 'pinhole_ram_cache_tokens_restored_total', ram_hits: 'pinhole_ram_cache_hits_total',
  ram_saves: 'pinhole_ram_cache_saves_total', disk: 'pinhole_disk_cache_tokens_restored_total',
  disk_hits: 'pinhole_disk_cache_hits_total', disk_rejected: 'pinhole_disk_cache_rejected_total',
};
export async function counters(srv, headers = {}) {
  const s = await metrics(srv, headers);
  return Object.fromEntries(Object.entries(COUNTERS).map(([k, n]) => [k, metric(s, n)]));
}
export const diff = (a, b) => Object.fromEntries(Object.keys(a).map((k) => [k, b[k] - a[k]]));

export async function ask(srv, messages) {
  const r = await openai(srv).chat.completions.create({
    model: srv.model.id, messages, max_tokens: ASK_TOKENS, temperature: 0, logprobs: true, top_logprobs: 5,
  });
  return {
    text: r.choices[0].message.content, reasoning: r.choices[0].message.reasoning_content, prompt: r.usage.prompt_tokens,
    cached: r.usage.prompt_tokens_details.cached_tokens, lp: r.choices[0].logprobs.content,
  };
}

// A turn on the warm server, checked against the cold one; returns the
// turn's answer and what it cost.
export async function turnVsCold(warm, cold, messages, what) {
  const before = await counters(warm);
  const w = await ask(warm, messages);
  const d = diff(before, await counters(warm));
  const c = await ask(cold, messages);
  assert.equal(w.text, c.text, `${what}: the same answer as a cold server`);
  assert.equal(w.reasoning, c.reasoning, `${what}: the same reasoning as a cold server`);
  assert.equal(w.prompt, c.prompt, `${what}: the same prompt`);
  assert.equal(c.cached, 0, `${what}: the cold server reuses nothing`);
  assert.equal(w.lp.length, c.lp.length);
  for (let i = 0; i < w.lp.length; i++) {
    assert.equal(w.lp[i].token, c.lp[i].token, `${what}: token ${i}`);
    for (let k = 0; k < 5; k++) {
      const a = w.lp[i].top_logprobs[k], b = c.lp[i].top_logprobs[k];
      assert.ok(a.token === b.token || Math.abs(a.logprob - b.logprob) < 1e-3, `${what}: step ${i} top ${k}`);
      assert.ok(Math.abs(a.logprob - b.logprob) < 2e-2, `${what}: step ${i} top ${k}: ${a.logprob} vs ${b.logprob}`);
    }
  }
  return { ...w, d };
}

