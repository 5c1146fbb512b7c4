// docs/clients.md's typed client, tried: the documented command (openapi-typescript on docs/openapi.json) runs, and
// its output compiles under strict TypeScript with a caller's use of it: the deposit's answer types, each error code
// with its `retryable` as a constant (a wrong flag does not compile).
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { describe, it } from 'node:test';
import ts from 'typescript';
import { scratchDir } from '../support/scratch.js';

const ROOT = fileURLToPath(new URL('../../', import.meta.url));

const CALLER = `
import type { components, operations } from './sidecar.js';

type Deposit = operations['postApiV2TransactionInit'];
export type DepositBody = Deposit['requestBody']['content']['application/json'];
export type Paid = Deposit['responses']['2XX']['content']['application/json'];
type InProgress = components['schemas']['sidecar.idempotency.in_progress'];
type OutcomeUnknown = components['schemas']['sidecar.upstream.outcome_unknown'];

export const body: DepositBody = { amount: '100.50', currency: 'USD', user_id: 'u-42', invoice_no: 'INV-1' };
export const link = (paid: Paid): string | undefined => paid.transaction_link;
export const inProgress: InProgress = { code: 'sidecar.idempotency.in_progress', message: 'later', retryable: true };
// @ts-expect-error outcome_unknown is never retryable
export const wrong: OutcomeUnknown = { code: 'sidecar.upstream.outcome_unknown', message: 'x', retryable: true };
export const key: Deposit['parameters']['header'] = { 'Idempotency-Key': 'k-1' };
`;

describe('a typed client generated from docs/openapi.json (openapi-typescript)', () => {
  it('`npx openapi-typescript docs/openapi.json -o sidecar.d.ts` runs, and a strict caller of it compiles', async () => {
    const dir = scratchDir('typed-client-');
    const cli = join(ROOT, 'node_modules/openapi-typescript/bin/cli.js');
    await promisify(execFile)(process.execPath, [cli, 'docs/openapi.json', '-o', join(dir, 'sidecar.d.ts')], {
      cwd: ROOT,
      timeout: 60_000,
    });
    await writeFile(join(dir, 'caller.ts'), CALLER);
    const program = ts.createProgram([join(dir, 'caller.ts')], {
      strict: true,
      noEmit: true,
      module: ts.ModuleKind.NodeNext,
      moduleResolution: ts.ModuleResolutionKind.NodeNext,
      target: ts.ScriptTarget.ES2022,
      skipLibCheck: false,
      types: [],
    });
    const problems = ts.getPreEmitDiagnostics(program).map((d) => ts.flattenDiagnosticMessageText(d.messageText, '\n'));
    assert.deepEqual(problems, []);
  });
});
