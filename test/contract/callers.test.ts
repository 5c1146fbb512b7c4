// The example callers (examples/*/deposit.*), each run as its own program with the toolchain of Debian's packages
// (the typed TypeScript one with this Node and the repository's tsx), against the simulator through a real sidecar: a clean run (the transaction_link printed, exit 0); a run with
// faults armed so that the retry path runs (503 token.unavailable before anything is sent, then an attempt that
// outlives the caller's timeout, so its retry gets 409 in_progress and then the replayed answer: one payment); and
// an outcome_unknown, which the caller must not send again (exit 1, naming the code, one request).
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { after, before, describe, it } from 'node:test';
import { startSimulator, type RunningSimulator } from '@signing-sidecar/simulator';
import { OPENAPI_FILE } from '../../scripts/openapi.js';
import { makeKeys, type TestKeys } from '../support/keys.js';
import { TEST_PASSWORD, TEST_USERNAME } from '../support/recording-gateway.js';
import { sidecarEnv, startTestSidecar, waitUntilReady, type TestSidecar } from '../support/sidecar.js';
import { waitFor } from '../support/wait-for.js';

const EXAMPLES = fileURLToPath(new URL('../../examples/', import.meta.url));

/** Debian's toolchain where it is installed (as CI and `npm test`'s prerequisites install it), else the PATH's. */
const debian = (tool: string): string => (existsSync(`/usr/bin/${tool}`) ? `/usr/bin/${tool}` : tool);

/** Each caller: the command that runs it, from its own directory. */
const CALLERS: Readonly<Record<string, { dir: string; command: readonly string[] }>> = {
  curl: { dir: 'curl', command: ['bash', 'deposit.sh'] },
  python: { dir: 'python', command: [debian('python3'), 'deposit.py'] },
  go: { dir: 'go', command: [debian('go'), 'run', 'deposit.go'] },
  java: { dir: 'java', command: [debian('java'), 'Deposit.java'] },
  node: { dir: 'node', command: [process.execPath, 'deposit.mjs'] },
  typescript: { dir: 'typescript', command: [process.execPath, '--import', 'tsx', 'deposit.ts'] },
};

interface Run {
  readonly exitCode: number | null;
  readonly stdout: string;
  readonly stderr: string;
}

/** Runs a caller to its end (killed after `ms`). */
function runCaller(name: string, env: NodeJS.ProcessEnv, ms = 90_000): Promise<Run> {
  const { dir, command } = CALLERS[name]!;
  const [program, ...args] = command;
  const child = spawn(program!, args, {
    cwd: `${EXAMPLES}${dir}`,
    env: { PATH: process.env.PATH, HOME: process.env.HOME, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
    // Its own process group: `go run` starts the built program as a child of its own; a timeout kills both.
    detached: true,
  });
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (chunk: Buffer) => (stdout += chunk.toString()));
  child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
  const timer = setTimeout(() => process.kill(-child.pid!, 'SIGKILL'), ms);
  return new Promise((resolve, reject) => {
    child.on('error', reject);
    child.on('close', (exitCode) => {
      clearTimeout(timer);
      resolve({ exitCode, stdout, stderr });
    });
  });
}

let simulator: RunningSimulator;
let keys: TestKeys;
let clean: TestSidecar;
const sidecars: TestSidecar[] = [];

async function sidecar(extra: NodeJS.ProcessEnv = {}): Promise<TestSidecar> {
  const running = await startTestSidecar(await sidecarEnv(keys, simulator.baseUrl, extra));
  sidecars.push(running);
  return running;
}

before(async () => {
  keys = await makeKeys();
  simulator = await startSimulator({
    accounts: [{ username: TEST_USERNAME, password: TEST_PASSWORD, publicKeyPem: keys.publicKeyPem }],
  });
  clean = await sidecar();
  await waitUntilReady(clean.sidecar);
});
after(async () => {
  for (const running of sidecars) await running.stop();
  await simulator?.close();
});

let invoices = 0;
const newInvoice = (name: string): string => `INV-${name}-${process.pid}-${++invoices}`;

/** The request lines the sidecar logged for one invoice's key (all attempts of one caller share it). */
function linesOf(running: TestSidecar, from: number): Array<Record<string, unknown>> {
  return running.logs
    .lines()
    .slice(from)
    .filter((line) => line.event === 'request');
}

function transactionsOf(invoice: string) {
  return simulator.transactions().filter((tx) => tx.invoice_no === invoice);
}

for (const name of Object.keys(CALLERS)) {
  describe(`examples/${CALLERS[name]!.dir}: ${CALLERS[name]!.command.slice(1).join(' ')}`, () => {
    it('a clean run: one request, the transaction_link printed, exit 0', async () => {
      const invoice = newInvoice(name);
      const from = clean.logs.lines().length;
      const run = await runCaller(name, { SIDECAR_URL: clean.sidecar.egressUrl, INVOICE_NO: invoice });
      assert.equal(run.exitCode, 0, run.stderr);
      const [tx] = transactionsOf(invoice);
      assert.ok(tx, 'the deposit exists at the gateway');
      assert.equal(transactionsOf(invoice).length, 1);
      assert.match(run.stdout.trim(), new RegExp(`^https?://\\S+${tx.transaction_id}\\S*$`));
      const lines = linesOf(clean, from);
      assert.deepEqual(
        lines.map((line) => line.code),
        ['ok'],
      );
      assert.equal(typeof lines[0]!.idempotencyKeySha256, 'string', 'sent with an Idempotency-Key');
    });

    it('faults: 503 before sending, then a 409 while the first is in flight: retried with the same key, paid once', async () => {
      const invoice = newInvoice(name);
      // The sidecar starts with every login refused: the caller's first attempts get 503 token.unavailable.
      simulator.faults.inject({ kind: '5xx', status: 503, target: 'token', count: 10_000 });
      const running = await sidecar({ SIDECAR_TOKEN_LOGIN_BACKOFF_MAX_MS: '300' });
      const caller = runCaller(name, {
        SIDECAR_URL: running.sidecar.egressUrl,
        INVOICE_NO: invoice,
        ATTEMPT_TIMEOUT_SECONDS: '2',
        MAX_ATTEMPTS: '15',
      });
      try {
        await waitFor(
          'a 503 token.unavailable answered to the caller',
          () => linesOf(running, 0).some((line) => line.code === 'sidecar.token.unavailable'),
          60_000,
        );
      } finally {
        simulator.faults.clear();
        // Logins work again; the deposit, once sent, is answered only after 8 s: past the caller's 2 s timeout.
        simulator.faults.inject({ kind: 'delay', delayMs: 8_000, target: 'signed', count: 1 });
      }
      const run = await caller;
      assert.equal(run.exitCode, 0, run.stderr);
      assert.equal(transactionsOf(invoice).length, 1, 'one payment, however many attempts');
      assert.match(run.stdout.trim(), new RegExp(`${transactionsOf(invoice)[0]!.transaction_id}`));
      const lines = linesOf(running, 0);
      const codes = lines.map((line) => `${String(line.code)}${line.replayed === true ? ' (replayed)' : ''}`);
      assert.ok(codes.includes('sidecar.token.unavailable'), codes.join(', '));
      assert.ok(codes.includes('sidecar.idempotency.in_progress'), codes.join(', '));
      assert.equal(codes.filter((code) => code === 'ok').length, 1, `sent once: ${codes.join(', ')}`);
      assert.equal(codes.at(-1), 'ok (replayed)', 'the answer came from the record');
      assert.equal(new Set(lines.map((line) => line.idempotencyKeySha256)).size, 1, 'every attempt with one key');
    });

    it('outcome_unknown: not sent again, exit 1 naming the code', async () => {
      const invoice = newInvoice(name);
      const from = clean.logs.lines().length;
      simulator.faults.inject({ kind: 'reset', target: 'signed', count: 1 });
      const run = await runCaller(name, { SIDECAR_URL: clean.sidecar.egressUrl, INVOICE_NO: invoice });
      simulator.faults.clear();
      assert.equal(run.exitCode, 1, run.stderr);
      assert.match(run.stderr, /sidecar\.upstream\.outcome_unknown/);
      assert.equal(run.stdout, '');
      assert.deepEqual(
        linesOf(clean, from).map((line) => line.code),
        ['sidecar.upstream.outcome_unknown'],
        'one attempt only',
      );
    });
  });
}

describe("the contract's deposit example (docs/openapi.json), as a fuzzer following it sends it", () => {
  it('is a payment: the simulator answers 2xx with a transaction_link', async () => {
    const document = JSON.parse(readFileSync(OPENAPI_FILE, 'utf8')) as {
      paths: Record<string, { post: { requestBody: { content: Record<string, { examples: Examples }> } } }>;
    };
    const examples = document.paths[DEPOSIT]!.post.requestBody.content['application/json']!.examples;
    assert.ok(Object.keys(examples).length >= 1);
    for (const [name, { value }] of Object.entries(examples)) {
      const answer = await fetch(`${clean.sidecar.egressUrl}${DEPOSIT}`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify(value),
      });
      const text = await answer.text();
      assert.equal(answer.status, 200, `${name}: ${text}`);
      assert.match((JSON.parse(text) as { transaction_link?: string }).transaction_link ?? '', /^https?:\/\//, name);
    }
  });
});

type Examples = Record<string, { value: unknown }>;
const DEPOSIT = '/api/v2/transaction/init';
