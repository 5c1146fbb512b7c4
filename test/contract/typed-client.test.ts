// The typed client of examples/typescript, built from the contract: its types are what openapi-typescript's own
// command makes of docs/openapi.json (stale: `npm run docs:openapi`), and the caller (deposit.ts, over openapi-fetch)
// compiles with them under strict TypeScript, beside a caller's other uses of the types: the deposit's payload and
// answer, each error code with its `retryable` as a constant, the postback's headers. A contract change that breaks
// a caller fails here; test/contract/callers.test.ts runs the caller against a real sidecar.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { writeFile } from 'node:fs/promises';
import { dirname, join, relative } from 'node:path';
import { describe, it } from 'node:test';
import ts from 'typescript';
import { generateTypes, TYPED_CLIENT_FILE } from '../../scripts/openapi.js';
import { scratchDir } from '../support/scratch.js';

const EXAMPLE_CONFIG = join(dirname(TYPED_CLIENT_FILE), 'tsconfig.json');

/** Uses of the generated types a caller relies on; each `@ts-expect-error` is a mistake the types must refuse. */
const uses = (types: string) => `
import type { components, operations } from '${types}';

type Deposit = operations['postApiV2TransactionInit'];
export type DepositBody = Deposit['requestBody']['content']['application/json'];
export type Paid = Deposit['responses']['2XX']['content']['application/json'];
type InProgress = components['schemas']['sidecar.idempotency.in_progress'];
type OutcomeUnknown = components['schemas']['sidecar.upstream.outcome_unknown'];
type Delivery = operations['deliverPostback'];

export const body: DepositBody = { amount: '100.50', currency: 'USD', user_id: 'u-42', invoice_no: 'INV-1', more: 1 };
// @ts-expect-error amount is a decimal string
export const numeric: DepositBody = { amount: 100.5 };
export const link = (paid: Paid): string | undefined => paid.transaction_link;
export const inProgress: InProgress = { code: 'sidecar.idempotency.in_progress', message: 'later', retryable: true };
// @ts-expect-error outcome_unknown is never retryable
export const wrong: OutcomeUnknown = { code: 'sidecar.upstream.outcome_unknown', message: 'x', retryable: true };
export const key: Deposit['parameters']['header'] = { 'Idempotency-Key': 'k-1' };
export const withdrawal: operations['postApiV2TransferOutInit']['requestBody']['content']['application/json'] = {
  any: ['field'],
};
export const postbackId = (headers: Delivery['parameters']['header']): string => headers['webhook-id'];
// @ts-expect-error a postback is verified by its signature or accepted unsigned, nothing else
export const verified: Delivery['parameters']['header']['X-Postback-Verified'] = 'maybe';
`;

describe('the typed client of examples/typescript (openapi-typescript, openapi-fetch)', () => {
  it('its sidecar.d.ts is what `openapi-typescript docs/openapi.json` makes (else run `npm run docs:openapi`)', async () => {
    const fresh = join(scratchDir('typed-client-'), 'sidecar.d.ts');
    await generateTypes(fresh);
    assert.equal(readFileSync(TYPED_CLIENT_FILE, 'utf8'), readFileSync(fresh, 'utf8'));
  });

  it('deposit.ts and a caller of the types compile under strict TypeScript', async () => {
    const checks = join(scratchDir('typed-client-uses-'), 'uses.mts');
    await writeFile(checks, uses(relative(dirname(checks), TYPED_CLIENT_FILE).replace(/\.d\.ts$/, '.js')));
    const config = ts.getParsedCommandLineOfConfigFile(
      EXAMPLE_CONFIG,
      {},
      {
        ...ts.sys,
        onUnRecoverableConfigFileDiagnostic: (d) => assert.fail(ts.flattenDiagnosticMessageText(d.messageText, '\n')),
      },
    )!;
    assert.equal(config.options.strict, true);
    assert.ok(config.fileNames.some((file) => file.endsWith('/deposit.ts')));
    const program = ts.createProgram([...config.fileNames, checks], config.options);
    const problems = ts
      .getPreEmitDiagnostics(program)
      .map((d) => `${d.file?.fileName ?? ''}: ${ts.flattenDiagnosticMessageText(d.messageText, '\n')}`);
    assert.deepEqual(problems, []);
  });
});
