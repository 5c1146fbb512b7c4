// Queued delivery on highly available Redis (real redis-server and redis-sentinel processes): postbacks accepted
// while the application is down are acknowledged by a replica, the primary holding them is killed, and after the
// failover every one of them reaches the application, each transaction's in order. On a Redis Cluster every
// script of the inbox runs in the account's one slot, and the operator's command reads it through the cluster.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { postbacks } from '../../src/cli/postbacks.js';
import { accountTag, DEFAULT_REDIS_KEY_PREFIX } from '../../src/state/redis-keys.js';
import { TEST_USERNAME } from '../support/recording-gateway.js';
import { promotedOwner, startCluster, startSentinelSet } from '../support/redis-topologies.js';
import { runCommand } from '../tools/run-command.js';
import {
  deliver,
  gatewayKeys,
  ApplicationStub,
  signPostback,
  startSignedReceiver,
  type ReceiverWorld,
} from './support.js';

const TRANSACTIONS = ['tx-ha-1', 'tx-ha-2', 'tx-ha-3', 'tx-ha-4', 'tx-ha-5'];

/**
 * Ten postbacks (each transaction's SUCCESS then FAILED) accepted while the application is down; then `failover`
 * (given the running receiver); then the application back: all ten delivered, each transaction's in order.
 */
async function acceptedSurvive(
  redisEnv: Readonly<Record<string, string>>,
  failover: (world: ReceiverWorld) => Promise<void>,
): Promise<void> {
  const application = await new ApplicationStub().start();
  const port = Number(new URL(application.url).port);
  await application.stop();
  const gateway = await gatewayKeys();
  const world = await startSignedReceiver(
    gateway,
    {
      ...redisEnv,
      SIDECAR_REDIS_COMMAND_TIMEOUT_MS: '1000',
      SIDECAR_POSTBACK_DELIVERY: 'queued',
      SIDECAR_POSTBACK_RETRY_SCHEDULE: '0s,500ms,1s,1s,1s,2s,2s,2s,2s,2s,2s,2s,2s,2s,2s,2s,2s,2s',
    },
    application,
  );
  try {
    for (const id of TRANSACTIONS) {
      for (const status of ['SUCCESS', 'FAILED']) {
        const payload = JSON.stringify({ transaction_id: id, status });
        const answer = await deliver(world.receiverUrl, await signPostback(gateway.privateKeyPem, { payload }));
        assert.deepEqual(answer.body, { status: 'accepted' }, `${id} ${status}`);
      }
    }
    await failover(world);
    await application.start(port);
    const deadline = Date.now() + 60_000;
    const seen = () => new Set(application.received.map((r) => r.body.toString('utf8')));
    while (seen().size < 10) {
      if (Date.now() > deadline) throw new Error(`${seen().size} of 10 postbacks delivered after the failover`);
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
    for (const id of TRANSACTIONS) {
      const statuses = application.received
        .map((r) => JSON.parse(r.body.toString('utf8')) as { transaction_id: string; status: string })
        .filter((p) => p.transaction_id === id)
        .map((p) => p.status);
      assert.deepEqual([...new Set(statuses)], ['SUCCESS', 'FAILED'], `${id} in arrival order`);
    }
  } finally {
    await world.stop();
  }
}

describe('queued delivery through a Redis failover', () => {
  it("Redis Cluster: the slot's primary killed while postbacks wait; the promoted replica has them all", async () => {
    const ha = await startCluster(3, 1);
    try {
      await acceptedSurvive(ha.env, async (world) => {
        // The operator's view, read through the cluster client from the account's slot.
        const listed = await runCommand(postbacks, ['list'], world.env);
        assert.equal(listed.code, 0, listed.stderr);
        assert.match(listed.stdout, /^undelivered 10 /);
        assert.equal(listed.stdout.match(/ waiting /g)?.length, 5, 'each FAILED waits behind its SUCCESS');
        const tag = accountTag('http://127.0.0.1:1', TEST_USERNAME);
        const key = `${DEFAULT_REDIS_KEY_PREFIX}{${tag}}:x`;
        const slot = Number((await ha.nodes[0]!.cli('CLUSTER', 'KEYSLOT', key))[0]);
        const owner = await ha.ownerOf(slot);
        await ha.nodes[owner]!.crash();
        assert.notEqual(await promotedOwner(ha, slot, owner), owner);
        await ha.nodes[owner]!.start();
      });
    } finally {
      await ha.close();
    }
  });

  it('Sentinel: the primary killed while postbacks wait; the promoted replica has them all', async () => {
    const set = await startSentinelSet();
    try {
      await acceptedSurvive(set.env, async () => {
        const before = await set.currentPrimary();
        await set.primary.crash();
        assert.notEqual(await set.failedOver(before, 30_000), before);
        await set.primary.start();
      });
    } finally {
      await set.close();
    }
  });
});
