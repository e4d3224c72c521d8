// The request fields the official TypeScript clients declare, read from
// their type declarations in node_modules (the top-level members of each
// create-params interface), so that a client release that adds a field
// shows up here as a field in none of pinhole's lists.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

const NM = join(fileURLToPath(new URL('.', import.meta.url)), 'node_modules');

/** The top-level member names of `export interface NAME { ... }` in a .d.ts file. */
export function interfaceFields(file, name) {
  const src = readFileSync(join(NM, file), 'utf8');
  const at = src.indexOf(`export interface ${name} {`);
  if (at < 0) throw new Error(`${file} declares no interface ${name}`);
  const fields = [];
  let depth = 0, line = '';
  for (let i = src.indexOf('{', at); i < src.length; i++) {
    const c = src[i];
    if (c === '{') depth++;
    else if (c === '}' && --depth === 0) break;
    if (c === '\n') {
      const m = /^\s*(?:readonly\s+)?([A-Za-z_][A-Za-z0-9_]*)\??:/.exec(line);
      if (m) fields.push(m[1]);
      line = '';
    } else if (depth === 1) line += c;
    else if (c === '{' && depth === 2) line += c; // a member whose type opens a block still names itself
  }
  return [...new Set(fields)];
}

// Each API's endpoint and the interfaces (stable and beta) whose fields it may get.
export const SDK_APIS = [
  { api: 'chat_completions', path: '/v1/chat/completions', decls: [
    ['openai/resources/chat/completions/completions.d.ts', 'ChatCompletionCreateParamsBase']] },
  { api: 'responses', path: '/v1/responses', decls: [
    ['openai/resources/responses/responses.d.ts', 'ResponseCreateParamsBase'],
    ['openai/resources/beta/responses/responses.d.ts', 'ResponseCreateParamsBase']] },
  { api: 'messages', path: '/v1/messages', decls: [
    ['@anthropic-ai/sdk/resources/messages/messages.d.ts', 'MessageCreateParamsBase'],
    ['@anthropic-ai/sdk/resources/beta/messages/messages.d.ts', 'MessageCreateParamsBase']] },
  { api: 'messages', path: '/v1/messages/count_tokens', decls: [
    ['@anthropic-ai/sdk/resources/messages/messages.d.ts', 'MessageCountTokensParams'],
    ['@anthropic-ai/sdk/resources/beta/messages/messages.d.ts', 'MessageCountTokensParams']] },
];

export function sdkFields(entry) {
  return [...new Set(entry.decls.flatMap(([f, n]) => interfaceFields(f, n)))].sort();
}
