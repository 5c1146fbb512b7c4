// Money limits end to end: the sidecar as `serve` starts it, SIDECAR_LIMITS_FILE on disk, the real simulator as the
// gateway. What the gateway receives is the truth: its transactions are counted to the cent.
import assert from 'node:assert/strict';
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { startSimulator, type RunningSimulator } from '@signing-sidecar/simulator';
import { limits } from '../../src/cli/limits.js';
import { makeKeys } from '../support/keys.js';
import { withSidecar } from '../support/idempotent-calls.js';
import { TEST_PASSWORD, TEST_USERNAME } from '../support/recording-gateway.js';
import { scratchDir } from '../support/scratch.js';
import { sidecarEnv, startTestSidecar, waitUntilReady, type TestSidecar } from '../support/sidecar.js';
import { postJson, type Answer } from '../support/sim-world.js';
import { waitFor } from '../support/wait-for.js';
import { runCommand } from '../tools/run-command.js';

const WITHDRAWAL = '/api/v2/transfer-out/init';

const rulesYaml = (hourly: string, mode = 'enforce') => `rules:
  - name: withdrawals-usd
    route: ${WITHDRAWAL}
    currency: USD
    maxAmount: "1000.00"
    windows:
      - { period: 1h, maxTotal: "${hourly}" }
    mode: ${mode}
`;

interface World {
  readonly simulator: RunningSimulator;
  readonly pod: TestSidecar;
  readonly rulesFile: string;
  /** The settings the sidecar was started with. */
  readonly env: NodeJS.ProcessEnv;
  withdraw(amount: string, headers?: Record<string, string>, extra?: Record<string, unknown>): Promise<Answer>;
  /** The sum of the USD withdrawals the gateway holds, in cents. */
  gatewayCents(): number;
  metric(name: string): Promise<string>;
  close(): Promise<void>;
}

async function startWorld(rules: string): Promise<World> {
  const keys = await makeKeys();
  const simulator = await startSimulator({
    accounts: [{ username: TEST_USERNAME, password: TEST_PASSWORD, publicKeyPem: keys.publicKeyPem }],
  });
  const rulesFile = join(scratchDir('limits-'), 'limits.yaml');
  await writeFile(rulesFile, rules);
  const env = await sidecarEnv(keys, simulator.baseUrl, {
    SIDECAR_LIMITS_FILE: rulesFile,
    SIDECAR_SECRET_POLL_INTERVAL_MS: '100',
    SIDECAR_LOG_LEVEL: 'info',
  });
  const pod = await startTestSidecar(env);
  await waitUntilReady(pod.sidecar);
  let invoice = 0;
  return {
    simulator,
    pod,
    rulesFile,
    env,
    withdraw: (amount, headers = {}, extra = {}) =>
      postJson(
        pod.sidecar.egressUrl,
        JSON.stringify({ amount, currency: 'USD', user_id: 'u-1', invoice_no: `w-${++invoice}`, ...extra }),
        WITHDRAWAL,
        headers,
      ),
    gatewayCents: () =>
      simulator
        .transactions()
        .filter((tx) => tx.type === 'withdrawal' && tx.currency === 'USD')
        .reduce((sum, tx) => sum + Math.round(Number(tx.amount) * 100), 0),
    metric: async (name) => (await pod.sidecar.metrics.registry.getSingleMetricAsString(name)) ?? '',
    async close() {
      await pod.stop();
      await simulator.close();
    },
  };
}

describe('money limits, one sidecar', () => {
  it('a caller in a loop meets the hourly total: refused 403 naming the rule and window, nothing more sent', async () => {
    const world = await startWorld(rulesYaml('5000.00'));
    try {
      const answers: Answer[] = [];
      for (let i = 0; i < 12; i++) answers.push(await world.withdraw('450.25'));
      const paid = answers.filter((a) => a.status === 200).length;
      // 11 x 450.25 = 4,952.75; the 12th would make 5,403.00.
      assert.equal(paid, 11);
      const refused = answers.at(-1)!;
      assert.equal(refused.status, 403);
      assert.deepEqual(JSON.parse(refused.body), {
        code: 'sidecar.limit.exceeded',
        message: 'the payment would take limit rule "withdrawals-usd" past its 1h window; nothing was sent',
        retryable: false,
        rule: 'withdrawals-usd',
        window: '1h',
      });
      assert.equal(world.gatewayCents(), 495_275, 'the gateway holds exactly the payments answered 200');
      assert.equal((await world.withdraw('47.25')).status, 200, 'what is left of the window still goes');
      assert.equal((await world.withdraw('0.01')).status, 403);
      assert.equal(world.gatewayCents(), 500_000, 'to the cent');
      assert.match(
        await world.metric('signing_sidecar_limit_refusals_total'),
        /rule="withdrawals-usd",mode="enforce"} 2/,
      );
      assert.match(await world.metric('signing_sidecar_limit_use_ratio'), /rule="withdrawals-usd",window="1h"} 1$/m);
      const lines = world.pod.logs.lines().filter((l) => l.event === 'limit.refused');
      assert.equal(lines.length, 2);
      assert.doesNotMatch(world.pod.logs.text, /450\.25|"data"/, 'no amount, no payload in the logs');
      // The operator's view in the pod: the memory store's use, asked of the serving sidecar's admin port.
      const adminPort = new URL(world.pod.sidecar.adminUrl).port;
      const printed = await runCommand(limits, [], { ...world.env, SIDECAR_ADMIN_PORT: adminPort });
      assert.equal(printed.code, 0, printed.stderr);
      assert.deepEqual(printed.stdout.split('\n'), [
        'RULE             MODE     WINDOW   CURRENCY  USED     MAX      LEFT',
        'withdrawals-usd  enforce  payment  USD       -        1000.00  -',
        'withdrawals-usd  enforce  1h       USD       5000.00  5000.00  0.00',
        '',
      ]);
    } finally {
      await world.close();
    }
  });

  it('a payment above maxAmount and amounts it cannot count exactly are refused with nothing sent', async () => {
    const world = await startWorld(rulesYaml('5000.00'));
    try {
      const above = await world.withdraw('1000.01');
      assert.equal(above.status, 403);
      assert.equal((JSON.parse(above.body) as { window: string }).window, 'payment');
      for (const amount of ['1.005', '-5.00', '1e3', '0.00']) {
        const answer = await world.withdraw(amount);
        assert.equal(answer.status, 400, amount);
        assert.equal(answer.code, 'sidecar.limit.amount_invalid');
        assert.equal((JSON.parse(answer.body) as { retryable: boolean }).retryable, true);
        assert.ok(!answer.body.includes(amount), 'the answer does not echo the payload');
      }
      assert.equal(world.simulator.transactions().length, 0, 'nothing reached the gateway');
    } finally {
      await world.close();
    }
  });

  it('a replay does not count twice; a refusal from the gateway gives its share back', async () => {
    const world = await startWorld(rulesYaml('1000.00'));
    try {
      const key = { 'idempotency-key': 'pay-1' };
      const same = { invoice_no: 'w-pay-1' };
      assert.equal((await world.withdraw('600.00', key, same)).status, 200);
      const replayed = await world.withdraw('600.00', key, same);
      assert.equal(replayed.status, 200);
      const made = world.simulator.transactions().filter((tx) => tx.invoice_no === 'w-pay-1');
      assert.equal(made.length, 1, 'the replay was answered from its record, not sent');
      // The simulator refuses a payload without user_id (400 payload.field.missing): nothing made, nothing kept.
      const refusedByGateway = await world.withdraw('400.00', {}, { user_id: undefined });
      assert.equal(refusedByGateway.status, 400);
      assert.equal(refusedByGateway.code, 'payload.field.missing');
      assert.equal(
        (await world.withdraw('400.00')).status,
        200,
        '600 + 400 fits: neither the replay nor the 400 counted',
      );
      assert.equal((await world.withdraw('0.01')).status, 403);
      assert.equal(world.gatewayCents(), 100_000);
    } finally {
      await world.close();
    }
  });

  it('a payment whose outcome is unknown keeps its share, as does a 5xx: either may exist at the gateway', async () => {
    const world = await startWorld(rulesYaml('1000.00'));
    try {
      // The gateway makes the payment and the connection drops before its answer: 502 outcome_unknown.
      world.simulator.faults.inject({ kind: 'commit-reset' });
      const unknown = await world.withdraw('600.00');
      assert.equal(unknown.code, 'sidecar.upstream.outcome_unknown', unknown.body);
      assert.equal(world.gatewayCents(), 60_000, 'the gateway made it');
      world.simulator.faults.inject({ kind: '5xx', status: 503 });
      assert.equal((await world.withdraw('300.00')).status, 503);
      assert.equal((await world.withdraw('100.01')).status, 403, 'both kept: 900 of 1,000 counted');
      assert.equal((await world.withdraw('100.00')).status, 200);
      assert.equal(world.gatewayCents(), 70_000, 'never more than the cap, with the 5xx counted as if made');
    } finally {
      await world.close();
    }
  });

  it('a 409 or signature.nonce.replayed from the gateway keeps the share: the payment may exist', async () => {
    const rulesFile = join(scratchDir('limits-kept-'), 'limits.yaml');
    await writeFile(rulesFile, rulesYaml('1000.00'));
    await withSidecar({ SIDECAR_LIMITS_FILE: rulesFile, SIDECAR_LOG_LEVEL: 'warn' }, {}, async (gateway, running) => {
      const withdraw = (amount: string) =>
        postJson(
          running.sidecar.egressUrl,
          JSON.stringify({ amount, currency: 'USD', invoice_no: amount }),
          WITHDRAWAL,
        );
      gateway.script.push({ status: 409, body: { code: 'duplicate', message: 'seen before' } });
      assert.equal((await withdraw('400.00')).status, 409);
      gateway.script.push({ status: 401, body: { code: 'signature.nonce.replayed', message: 'replayed' } });
      assert.equal((await withdraw('400.00')).status, 401);
      gateway.script.push({ status: 400, body: { code: 'payload.field.invalid', message: 'no' } });
      assert.equal((await withdraw('150.00')).status, 400);
      // 800 kept, the 400's 150 given back: 200 fits, 200.01 does not.
      assert.equal((await withdraw('200.01')).status, 403);
      assert.equal((await withdraw('200.00')).status, 201);
    });
  });

  it('a refused key is free again: after the rule is raised on disk, the same key pays, with no restart', async () => {
    const world = await startWorld(rulesYaml('100.00'));
    try {
      const key = { 'idempotency-key': 'pay-big' };
      const same = { invoice_no: 'w-pay-big' };
      assert.equal((await world.withdraw('500.00', key, same)).status, 403);
      await writeFile(world.rulesFile, rulesYaml('1000.00'));
      await waitFor(
        'the raised rule in use',
        async () =>
          /setting="limits",outcome="success"} 1/.test(await world.metric('signing_sidecar_config_reloads_total')),
        5_000,
      );
      const paid = await world.withdraw('500.00', key, same);
      assert.equal(paid.status, 200, paid.body);
      assert.equal(paid.body.includes('sidecar.limit'), false, 'not the refusal replayed');
      // A broken file keeps the rules in use, counted and logged as refused.
      await writeFile(world.rulesFile, 'rules: [{ name: oops, route: /nowhere, maxPerMinute: 1 }]');
      await waitFor(
        'the broken file refused',
        async () =>
          /setting="limits",outcome="error"} 1/.test(await world.metric('signing_sidecar_config_reloads_total')),
        5_000,
      );
      assert.equal((await world.withdraw('500.00')).status, 200, 'the raised rule still holds');
      assert.equal((await world.withdraw('0.01')).status, 403);
      const refusedLine = world.pod.logs.lines().find((l) => l.event === 'config.reload' && l.outcome === 'error');
      assert.equal(refusedLine?.setting, 'SIDECAR_LIMITS_FILE (limitsFile)');
      assert.match(String(refusedLine?.reason), /rule "oops": route \/nowhere is not a signed route/);
    } finally {
      await world.close();
    }
  });

  it('report mode sends every payment and counts, logs and shows what it would have refused', async () => {
    const world = await startWorld(rulesYaml('1000.00', 'report'));
    try {
      for (let i = 0; i < 3; i++) assert.equal((await world.withdraw('500.00')).status, 200);
      assert.equal(world.gatewayCents(), 150_000, 'all sent');
      assert.match(await world.metric('signing_sidecar_limit_refusals_total'), /mode="report"} 1/);
      assert.match(await world.metric('signing_sidecar_limit_use_ratio'), /window="1h"} 1.5/);
      assert.equal(world.pod.logs.lines().filter((l) => l.event === 'limit.would_refuse').length, 1);
    } finally {
      await world.close();
    }
  });
});
