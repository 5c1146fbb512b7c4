// Fleet state on a Redis watched by Sentinel: a primary, one replica, three Sentinels (real processes). The
// primary is killed (SIGKILL) while two sidecar replicas take keyed payments, each sent twice by its caller to
// different replicas around the kill. Payments are counted where they land: the simulator's transactions.
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { startSimulator, type RunningSimulator } from '@signing-sidecar/simulator';
import { RedisStateStore } from '../../src/state/redis-store.js';
import { acceptable, freshDeposit, newKey, replyWhen, send, untilOk, type Reply } from '../support/idempotent-calls.js';
import { makeKeys, type TestKeys } from '../support/keys.js';
import { TEST_PASSWORD, TEST_USERNAME } from '../support/recording-gateway.js';
import { startSentinelSet, type SentinelSet } from '../support/redis-topologies.js';
import { sidecarEnv, startTestSidecar, waitUntilReady, type TestSidecar } from '../support/sidecar.js';
import { check } from '../../src/cli/check.js';
import { runCommand } from '../tools/run-command.js';

let keys: TestKeys;
let set: SentinelSet;
let simulator: RunningSimulator;
before(async () => {
  [keys, set] = await Promise.all([makeKeys(), startSentinelSet()]);
  simulator = await startSimulator({
    accounts: [{ username: TEST_USERNAME, password: TEST_PASSWORD, publicKeyPem: keys.publicKeyPem }],
  });
});
after(async () => {
  await Promise.all([set.close(), simulator.close()]);
});

async function replica(extra: NodeJS.ProcessEnv = {}): Promise<TestSidecar> {
  // A generous command timeout: two sidecars, a simulator and five Redis processes share a loaded test machine.
  const env = { ...set.env, SIDECAR_REDIS_COMMAND_TIMEOUT_MS: '1000', ...extra };
  const running = await startTestSidecar(await sidecarEnv(keys, simulator.baseUrl, env));
  await waitUntilReady(running.sidecar, 10_000);
  return running;
}

describe('Redis Sentinel: a failover under keyed traffic', () => {
  it('check reports the primary the Sentinels name and its replica', async () => {
    const run = await runCommand(check, [], await sidecarEnv(keys, simulator.baseUrl, set.env));
    assert.equal(run.code, 0, run.stdout);
    assert.match(
      run.stdout,
      /^✔ state store: redis sentinel sidecar-primary via (127\.0\.0\.1:\d+,?){3}: primary 127\.0\.0\.1:\d+, 1 replica; .*a write acknowledged by 1 replica$/m,
    );
  });

  // First, while the primary and its replica are both up.
  it('SIDECAR_REDIS_MIN_REPLICAS_ACKED=1 with the replica stopped: keyed payments refused 503, nothing sent', async () => {
    // A WAIT's own timeout is half the command timeout: 1 s here, as a loaded host can hold a healthy replica's
    // acknowledgement past the 500 ms of the suite's 1 s.
    const running = await replica({ SIDECAR_REDIS_MIN_REPLICAS_ACKED: '1', SIDECAR_REDIS_COMMAND_TIMEOUT_MS: '2000' });
    try {
      assert.equal(
        (await send(running.sidecar.egressUrl, newKey(), freshDeposit())).status,
        200,
        'with the replica up',
      );
      await set.replica.stop();
      try {
        // The primary drops a replica whose connection closed at once; WAIT then counts 0.
        await eventuallyRefused(() => send(running.sidecar.egressUrl, newKey(), freshDeposit()));
        const sentBefore = simulator.transactions().length;
        const reply = await send(running.sidecar.egressUrl, newKey(), freshDeposit());
        assert.equal(reply.status, 503);
        assert.equal(reply.code, 'sidecar.idempotency.unavailable');
        assert.equal(reply.retryable, true);
        assert.equal(simulator.transactions().length, sentBefore, 'nothing reached the gateway');
        const unkeyed = await send(running.sidecar.egressUrl, undefined, freshDeposit());
        assert.equal(unkeyed.status, 200, 'a request without a key does not depend on the replicas');
      } finally {
        await set.replica.start();
      }
      await untilOk(() => send(running.sidecar.egressUrl, newKey(), freshDeposit()));
    } finally {
      await running.stop();
    }
  });

  it('SIGKILL of the primary: no payment sent twice, every caller gets a replay, an outcome_unknown or a retryable 503, one login', async (t) => {
    const [one, two] = [await replica(), await replica()];
    try {
      const before = await set.currentPrimary();
      const grantsBefore = simulator.tokenGrants().password;
      const payments: Array<{ first: Reply; second: Reply }> = [];
      const pay = async (index: number) => {
        const body = freshDeposit();
        const key = newKey();
        const [a, b] = index % 2 === 0 ? [one, two] : [two, one];
        const first = await send(a.sidecar.egressUrl, key, body);
        const second = await send(b.sidecar.egressUrl, key, body);
        payments.push({ first, second });
      };
      let healed: Promise<string> | undefined;
      for (let i = 0; i < 500; i += 5) {
        await Promise.all([0, 1, 2, 3, 4].map((j) => pay(i + j)));
        if (i === 100) {
          await set.primary.crash();
          // As Kubernetes would restart the pod: the old primary comes back, and the Sentinels make it a replica
          // of the new one, so keyed payments can be acknowledged again.
          healed = set.failedOver(before, 30_000).then(async (now) => {
            await set.primary.start();
            return now;
          });
        }
      }
      const after = await (healed ?? Promise.reject(new Error('the primary was never killed')));
      assert.notEqual(after, before, 'the Sentinels promoted the replica');
      const perInvoice = new Map<string, number>();
      for (const txn of simulator.transactions()) {
        perInvoice.set(txn.invoice_no, (perInvoice.get(txn.invoice_no) ?? 0) + 1);
      }
      assert.deepEqual(
        [...perInvoice].filter(([, count]) => count > 1),
        [],
        'no payment reached the gateway twice',
      );
      assert.equal(payments.length, 500);
      for (const { first, second } of payments) {
        assert.ok(acceptable(first), `first answer ${first.status} ${first.code ?? ''}`);
        assert.ok(acceptable(second), `second answer ${second.status} ${second.code ?? ''}`);
        // Two 200s for one key: the second is the first replayed, byte for byte, never a second payment.
        if (first.status === 200 && second.status === 200) {
          assert.equal(second.replayed, true);
          assert.deepEqual(second.body, first.body);
        }
      }
      const refused = payments.filter((p) => p.first.status === 503 || p.second.status === 503).length;
      const replayed = payments.filter((p) => p.second.replayed).length;
      t.diagnostic(`${replayed} replayed, ${refused} with a retryable 503 around the failover; ${before} -> ${after}`);
      assert.ok(replayed >= 100, `the second copies before the kill were replays (${replayed})`);
      // Once the old primary is back as a replica, both sidecars work on the new primary by themselves.
      const key = newKey();
      const body = freshDeposit();
      const fresh = await untilOk(() => send(one.sidecar.egressUrl, key, body));
      assert.equal(fresh.status, 200, 'keyed payments go through again after the failover');
      const again = await send(two.sidecar.egressUrl, key, body);
      assert.equal(again.replayed, true, 'a key written after the failover is shared by both replicas');
      assert.equal(simulator.tokenGrants().password, grantsBefore, 'the token survived: no new password login');
    } finally {
      await Promise.all([one.stop(), two.stop()]);
    }
  });
});

describe('Redis Sentinel: the Sentinels restarted', () => {
  it('after a restart of every Sentinel, a second failover is still followed by a running sidecar', async (t) => {
    const running = await replica();
    try {
      assert.equal((await untilOk(() => send(running.sidecar.egressUrl, newKey(), freshDeposit()))).status, 200);
      await set.restartSentinels();
      const before = await set.currentPrimary();
      const [primary] = [set.primary, set.replica].filter((node) => before.endsWith(`:${node.port}`));
      assert.ok(primary !== undefined, `the primary ${before} is one of the two`);
      await primary.crash();
      const after = await set.failedOver(before, 30_000);
      await primary.start();
      assert.equal(await set.settled(30_000), after, 'the old primary came back as a replica');
      const reply = await untilOk(() => send(running.sidecar.egressUrl, newKey(), freshDeposit()));
      t.diagnostic(`${before} -> ${after} after the Sentinels' restart`);
      assert.equal(reply.status, 200, 'the sidecar found the new primary through the restarted Sentinels');
      const { store } = running.sidecar;
      assert.ok(store instanceof RedisStateStore);
      // The store's commands go to the promoted node: ROLE, asked on the store's own connection, answers from a
      // primary that has the old one as its replica (the old primary itself would answer as a replica, with none).
      let view = await store.topology();
      for (const deadline = Date.now() + 30_000; view.replicas !== 1 && Date.now() < deadline;) {
        await sleep(100);
        view = await store.topology();
      }
      assert.equal(view.replicas, 1, "the store's connection is on the promoted primary, the old one its replica");
      // The name node-redis gives that primary (the first of its primary connections that is ready) can still be the
      // old one: under the whole suite's load it was seen to stay so for over 30 s after a failover, while commands
      // already went to the new primary. Said, not judged.
      t.diagnostic(`the sidecar names its primary ${view.primary ?? 'none'}; the Sentinels promoted ${after}`);
    } finally {
      await running.stop();
    }
  });
});

/** A replica stopped is noticed by the primary within its replication timeout: until then WAIT may still count it. */
async function eventuallyRefused(call: () => Promise<Reply>): Promise<Reply> {
  return replyWhen(call, (reply) => reply.status !== 200, 20_000);
}
