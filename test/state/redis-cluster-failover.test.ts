// A failover inside a Redis Cluster shard (three primaries with a replica each, real redis-server processes): the
// primary of the account's slot is killed under keyed traffic; node-redis follows the promoted replica.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { startSimulator } from '@signing-sidecar/simulator';
import { accountTag, DEFAULT_REDIS_KEY_PREFIX } from '../../src/state/redis-keys.js';
import { acceptable, freshDeposit, newKey, send, untilOk, type Reply } from '../support/idempotent-calls.js';
import { makeKeys } from '../support/keys.js';
import { TEST_PASSWORD, TEST_USERNAME } from '../support/recording-gateway.js';
import { promotedOwner, startCluster } from '../support/redis-topologies.js';
import { sidecarEnv, startTestSidecar, waitUntilReady } from '../support/sidecar.js';

describe('a failover inside a Redis Cluster shard', () => {
  it("the primary of the account's slot killed under keyed traffic: its replica takes over, nothing sent twice", async (t) => {
    const ha = await startCluster(3, 1);
    const keys = await makeKeys();
    const simulator = await startSimulator({
      accounts: [{ username: TEST_USERNAME, password: TEST_PASSWORD, publicKeyPem: keys.publicKeyPem }],
    });
    const env = await sidecarEnv(keys, simulator.baseUrl, { ...ha.env, SIDECAR_REDIS_COMMAND_TIMEOUT_MS: '1000' });
    const pod = await startTestSidecar(env);
    try {
      await waitUntilReady(pod.sidecar, 10_000);
      const tag = accountTag(simulator.baseUrl, TEST_USERNAME);
      const slot = Number((await ha.nodes[0]!.cli('CLUSTER', 'KEYSLOT', `${DEFAULT_REDIS_KEY_PREFIX}{${tag}}:x`))[0]);
      const owner = await ha.ownerOf(slot);
      const answers: Array<{ first: Reply; second: Reply }> = [];
      let healed: Promise<number> | undefined;
      for (let i = 0; i < 150; i++) {
        const [key, body] = [newKey(), freshDeposit()];
        const first = await send(pod.sidecar.egressUrl, key, body);
        answers.push({ first, second: await send(pod.sidecar.egressUrl, key, body) });
        if (i === 30) {
          await ha.nodes[owner]!.crash();
          // The replica is promoted once the others agree the primary failed; the old one, restarted, rejoins as a
          // replica of it, so that keyed payments can be acknowledged again.
          healed = promotedOwner(ha, slot, owner).then(async (now) => {
            await ha.nodes[owner]!.start();
            return now;
          });
        }
      }
      const now = await (healed ?? Promise.reject(new Error('the primary was never killed')));
      assert.notEqual(now, owner, 'a replica serves the slot');
      const fresh = await untilOk(() => send(pod.sidecar.egressUrl, newKey(), freshDeposit()));
      assert.equal(fresh.status, 200, 'keyed payments go through again after the failover');
      const invoices = simulator.transactions().map((txn) => txn.invoice_no);
      assert.equal(new Set(invoices).size, invoices.length, 'no payment reached the gateway twice');
      for (const { first, second } of answers) {
        for (const reply of [first, second]) {
          assert.ok(acceptable(reply), `${reply.status} ${reply.code ?? ''}`);
        }
        if (first.status === 200 && second.status === 200) assert.equal(second.replayed, true);
      }
      const refused = answers.filter((a) => a.first.status === 503 || a.second.status === 503).length;
      t.diagnostic(
        `slot ${slot}: node ${owner} -> ${now}; ${refused} of ${answers.length} payments met a retryable 503`,
      );
    } finally {
      await pod.stop();
      await simulator.close();
      await ha.close();
    }
  });
});
