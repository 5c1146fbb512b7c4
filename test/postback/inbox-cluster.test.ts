// Queued delivery on a Redis Cluster (three primaries with a replica each, real redis-server processes): every
// script of the inbox runs in the account's one slot, its writes acknowledged by the slot's replica; the primary of
// that slot killed while postbacks wait: the promoted replica has every one of them.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { postbacks } from '../../src/cli/postbacks.js';
import { accountTag, DEFAULT_REDIS_KEY_PREFIX } from '../../src/state/redis-keys.js';
import { TEST_USERNAME } from '../support/recording-gateway.js';
import { promotedOwner, startCluster } from '../support/redis-topologies.js';
import { runCommand } from '../tools/run-command.js';
import { deliver, gatewayKeys, InternalWebhook, signPostback, startSignedReceiver } from './support.js';

describe('queued delivery on a Redis Cluster', () => {
  it("accepted postbacks survive a failover of their slot's primary and reach the application in order", async () => {
    const ha = await startCluster(3, 1);
    const webhook = await new InternalWebhook().start();
    const port = Number(new URL(webhook.url).port);
    await webhook.stop();
    const gateway = await gatewayKeys();
    const world = await startSignedReceiver(
      gateway,
      {
        ...ha.env,
        SIDECAR_REDIS_COMMAND_TIMEOUT_MS: '1000',
        SIDECAR_POSTBACK_DELIVERY: 'queued',
        SIDECAR_POSTBACK_RETRY_SCHEDULE: '0s,500ms,1s,1s,1s,2s,2s,2s,2s,2s,2s,2s,2s,2s,2s,2s,2s,2s',
      },
      webhook,
    );
    try {
      const transactions = ['tx-cluster-1', 'tx-cluster-2', 'tx-cluster-3', 'tx-cluster-4', 'tx-cluster-5'];
      for (const id of transactions) {
        for (const status of ['SUCCESS', 'FAILED']) {
          const payload = JSON.stringify({ transaction_id: id, status });
          const answer = await deliver(world.receiverUrl, await signPostback(gateway.privateKeyPem, { payload }));
          assert.deepEqual(answer.body, { status: 'accepted' }, `${id} ${status}`);
        }
      }
      // The operator's view, read through the cluster client from the account's slot.
      const listed = await runCommand(postbacks, ['list'], world.env);
      assert.equal(listed.code, 0, listed.stderr);
      assert.match(listed.stdout, /^undelivered 10 /);
      assert.equal(listed.stdout.match(/ waiting /g)?.length, 5, 'each FAILED waits behind its SUCCESS');

      const tag = accountTag('http://127.0.0.1:1', TEST_USERNAME);
      const slot = Number((await ha.nodes[0]!.cli('CLUSTER', 'KEYSLOT', `${DEFAULT_REDIS_KEY_PREFIX}{${tag}}:x`))[0]);
      const owner = await ha.ownerOf(slot);
      await ha.nodes[owner]!.crash();
      assert.notEqual(await promotedOwner(ha, slot, owner), owner);
      await ha.nodes[owner]!.start();

      await webhook.start(port);
      const deadline = Date.now() + 60_000;
      const seen = () => new Set(webhook.received.map((r) => r.body.toString('utf8')));
      while (seen().size < 10) {
        if (Date.now() > deadline) throw new Error(`${seen().size} of 10 postbacks delivered after the failover`);
        await new Promise((resolve) => setTimeout(resolve, 100));
      }
      for (const id of transactions) {
        const statuses = webhook.received
          .map((r) => JSON.parse(r.body.toString('utf8')) as { transaction_id: string; status: string })
          .filter((p) => p.transaction_id === id)
          .map((p) => p.status);
        assert.deepEqual([...new Set(statuses)], ['SUCCESS', 'FAILED'], `${id} in arrival order`);
      }
    } finally {
      await world.stop();
      await ha.close();
    }
  });
});
