// Decode speed with and without a sampling constraint (src/engine/constrain.h):
// the same server, the same synthetic model, requests in turns:
//   plain        tools shown, tool_choice none: the unconstrained decode (only
//                the <tool_call> token is banned, checked on the sampled token)
//   tools auto   tool_choice auto, the model writes no call: the answer
//                parser's holding back, no mask
//   tool call    tool_choice required (one call): every token of the answer is
//                under the call's constraint (framing, name, arguments' schema)
//   pattern call the tool open_ticket named: its arguments are strings with
//                pattern and format (a DFA step per character)
//   json_schema  response_format json_schema: every token under the schema
// With random weights the sampled token almost never fits the constraint, so
// nearly every constrained token pays for a full mask: the worst case. The
// decode rate of each request is the server's own (its log line "N tok/s",
// generated tokens over the time from the first to the last); the mask time
// is the server's debug line "constraint: N masks, X ms each; Y ms per token
// in all" (Y: every check, mask and feed of the constraint, over the tokens of
// the answer), so the constraint's share of the decode time is measured
// directly too, apart from the machine's noise between requests.
//
//   node bench/constraint.mjs PINHOLE MODEL.gguf [REPS] [THREADS]
import { spawn } from 'node:child_process';
import { appendFileSync, mkdirSync, readFileSync } from 'node:fs';
import { cpus } from 'node:os';

const [bin, model, repsArg = '5', threadsArg = '2'] = process.argv.slice(2);
if (!bin || !model) {
  console.error('usage: node bench/constraint.mjs PINHOLE MODEL.gguf [REPS] [THREADS]');
  process.exit(2);
}
const REPS = Number(repsArg);
const N = 160;

const WEATHER = { type: 'function', function: { name: 'get_weather', description: 'Get current weather for a city',
  parameters: { type: 'object', properties: { city: { type: 'string' }, unit: { type: 'string', enum: ['celsius', 'fahrenheit'] },
    days: { type: 'integer' }, details: { type: 'array', items: { type: 'string' }, maxItems: 4 } }, required: ['city', 'days'] } } };
const SEARCH = { type: 'function', function: { name: 'search', description: 'Search the notes',
  parameters: { type: 'object', properties: { query: { type: 'string' }, limit: { type: 'integer' }, exact: { type: 'boolean' } },
    required: ['query'] } } };
// Strings with pattern and format, as agents' tools declare ids, dates and paths.
const TICKET = { type: 'function', function: { name: 'open_ticket', description: 'Open a ticket',
  parameters: { type: 'object', properties: { id: { type: 'string', pattern: '^[A-Z]{2,4}-[0-9]{1,5}$' },
    due: { type: 'string', format: 'date' }, owner: { type: 'string', format: 'email' },
    path: { type: 'string', pattern: '^(/[a-z0-9_.-]+)+\\.(c|h|md)$' } }, required: ['id', 'due', 'owner', 'path'] } } };
const RESULT = { type: 'object', properties: { answer: { type: 'string' }, score: { type: 'number' }, ok: { type: 'boolean' },
  tags: { type: 'array', items: { type: 'string' } } }, required: ['answer', 'score', 'ok', 'tags'] };

// Every mode declares the same tools, so every prompt is the same (a longer
// KV makes each decoded token cost more; the modes must not differ in that).
const TOOLS = [WEATHER, SEARCH, TICKET];
const MODES = {
  plain: { tools: TOOLS, tool_choice: 'none' },
  'tools auto': { tools: TOOLS },
  'tool call': { tools: TOOLS, tool_choice: 'required', parallel_tool_calls: false },
  'pattern call': { tools: TOOLS, tool_choice: { type: 'function', function: { name: 'open_ticket' } }, parallel_tool_calls: false },
  json_schema: { tools: TOOLS, tool_choice: 'none', response_format: { type: 'json_schema', json_schema: { name: 'result', schema: RESULT } } },
};

const log = [];
const srv = spawn(bin, ['serve', '-m', model, '--port', '0', '-t', threadsArg, '-c', '2048', '-v', '--no-cache', '--any-model'],
  { stdio: ['ignore', 'ignore', 'pipe'] });
const url = await new Promise((resolve, reject) => {
  let buf = '';
  srv.stderr.on('data', (d) => {
    buf += d;
    const lines = buf.split('\n');
    buf = lines.pop();
    for (const l of lines) {
      log.push(l);
      const m = /listening on (http:\/\/\S+)/.exec(l);
      if (m) resolve(m[1]);
    }
  });
  srv.on('exit', (c) => reject(new Error(`pinhole serve exited (${c})`)));
});

async function run(mode, seed) {
  const from = log.length;
  const body = { model: 'any', messages: [{ role: 'user', content: 'Tell me about the weather and the notes.' }],
    max_tokens: N, temperature: 1, seed, ...MODES[mode] };
  const r = await fetch(`${url}/v1/chat/completions`, { method: 'POST', body: JSON.stringify(body), headers: { 'content-type': 'application/json' } });
  const js = await r.json();
  if (r.status !== 200) throw new Error(`${mode}: ${r.status} ${JSON.stringify(js)}`);
  await new Promise((res) => setTimeout(res, 50));
  const lines = log.slice(from);
  const done = lines.map((l) => /generated (\d+), .*?, ([\d.]+) tok\/s/.exec(l)).find(Boolean);
  const mask = lines.map((l) => /constraint: (\d+) masks, ([\d.]+) ms each; ([\d.]+) ms per token/.exec(l)).find(Boolean);
  const tokS = Number(done[2]);
  const perToken = mask ? Number(mask[3]) : 0;
  return { mode, seed, generated: Number(done[1]), tok_s: tokS, masks: mask ? Number(mask[1]) : 0,
           mask_ms: mask ? Number(mask[2]) : 0, constraint_ms_per_token: perToken,
           constraint_share: tokS > 0 ? perToken / (1000 / tokS) : 0, finish: js.choices[0].finish_reason };
}

const rows = [];
try {
  await run('plain', 0); // warm-up
  for (let rep = 0; rep < REPS; rep++) for (const mode of Object.keys(MODES)) rows.push(await run(mode, 1000 + rep));
} finally {
  srv.kill('SIGTERM');
}

const median = (xs) => { const s = [...xs].sort((a, b) => a - b); return s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2; };
const base = median(rows.filter((r) => r.mode === 'plain').map((r) => r.tok_s));
const flags = (readFileSync('/proc/cpuinfo', 'utf8').match(/^flags\s*:(.*)$/m)?.[1] ?? '').split(' ');
const isa = flags.includes('avx512f') ? `avx512${flags.includes('avx512_vnni') ? ' vnni' : ''}` : flags.includes('avx2') ? 'avx2' : 'scalar';
console.log(`decode with and without a constraint: ${model}, ${threadsArg} threads, ${cpus()[0].model} (${isa}), ${REPS} requests per mode, ${N} tokens at most`);
console.log('| mode | decode tok/s (median) | vs plain | tokens (median) | masked tokens | mask ms (median) | constraint ms per token | share of the decode time |');
console.log('|---|---|---|---|---|---|---|---|');
const out = { date: new Date().toISOString(), model, threads: Number(threadsArg), cpu: cpus()[0].model, isa, modes: {} };
for (const mode of Object.keys(MODES)) {
  const rs = rows.filter((r) => r.mode === mode);
  const t = median(rs.map((r) => r.tok_s));
  const masked = rs.reduce((a, r) => a + r.masks, 0) / Math.max(1, rs.reduce((a, r) => a + r.generated, 0));
  const ms = median(rs.map((r) => r.mask_ms));
  const per = median(rs.map((r) => r.constraint_ms_per_token));
  const share = median(rs.map((r) => r.constraint_share));
  out.modes[mode] = { tok_s: t, ratio: t / base, generated: median(rs.map((r) => r.generated)), masked_share: masked, mask_ms: ms,
                      constraint_ms_per_token: per, constraint_share: share, runs: rs };
  console.log(`| ${mode} | ${t.toFixed(2)} | ${(t / base).toFixed(3)} | ${median(rs.map((r) => r.generated))} | ${(100 * masked).toFixed(0)}% | ${ms.toFixed(2)} | ${per.toFixed(3)} | ${(100 * share).toFixed(2)}% |`);
}
mkdirSync('bench/results', { recursive: true });
appendFileSync(`bench/results/constraint-${out.date.slice(0, 10)}.jsonl`, `${JSON.stringify(out)}\n`);
