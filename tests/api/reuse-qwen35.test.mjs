// The state cache's cases of reuse-cases.mjs on oracle/qwen35's tiny
// Qwen3.5 pair, whose recurrent state is reused only at its snapshots:
// each turn resumes where the design says (after a picture, or before the
// answer's opener at the end of the previous prompt) and answers as a cold
// server does; and a picture chat resumed from its checkpoint file after a
// restart, at the snapshot before its opener.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';

import { QWEN35, startServer, stopServer } from './helpers.mjs';
import { auxiliaryCases, resumesAfterSigterm, reuseCases } from './reuse-cases.mjs';

reuseCases(QWEN35);
auxiliaryCases(QWEN35);

describe(`disk tier through the server (${QWEN35.id})`, { timeout: 600_000 }, () => {
  let cold;
  const dir = mkdtempSync(join(tmpdir(), 'ph-kv-'));
  before(async () => { cold = await startServer({ model: QWEN35, extra: ['--no-cache'] }); });
  after(async () => {
    await stopServer(cold);
    rmSync(dir, { recursive: true, force: true });
  });

  test('a picture chat resumes from disk after SIGTERM', () => resumesAfterSigterm(QWEN35, dir, cold));
});
