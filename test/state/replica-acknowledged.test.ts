// Writes a failover does not take back: with SIDECAR_REDIS_MIN_REPLICAS_ACKED, an idempotency claim counts only
// once a replica holds it (WAIT). A primary and one replica, real redis-server processes on 127.0.0.1.
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { accountTag } from '../../src/state/redis-keys.js';
import { RedisStateStore } from '../../src/state/redis-store.js';
import { freshKey, gatewayAnswer, keeperOn } from '../idempotency/keeper-contract.js';
import { assertKeyedRefusedUnkeyedSent, freshDeposit, newKey, send } from '../support/idempotent-calls.js';
import { makeKeys, type TestKeys } from '../support/keys.js';
import { RecordingGateway } from '../support/recording-gateway.js';
import { startRedis, startReplica, type TestRedis } from '../support/redis-server.js';
import { sidecarEnv, startTestSidecar, waitUntilReady } from '../support/sidecar.js';

// A WAIT's own timeout is half of it: 1 s for a replica on loopback to acknowledge, which it does in about a
// millisecond on an idle host, and which a host loaded by the suite's other files has stretched past 500 ms.
const COMMAND_TIMEOUT_MS = 2_000;

let primary: TestRedis;
let replica: TestRedis;
let keys: TestKeys;

/** The replicas the primary's INFO replication lists as online (synced: they acknowledge writes). */
async function connectedReplicas(): Promise<number> {
  const lines = await primary.cli('INFO', 'replication');
  return lines.filter((text) => /^slave\d+:.*state=online/.test(text)).length;
}

/** Until the primary counts `count` connected replicas (a replica's sync, or its exit, takes a moment). */
async function replicasConnected(count: number): Promise<void> {
  const deadline = Date.now() + 20_000;
  while ((await connectedReplicas()) !== count) {
    if (Date.now() > deadline) throw new Error(`the primary never counted ${count} replicas`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

before(async () => {
  [primary, keys] = await Promise.all([startRedis(), makeKeys()]);
  replica = await startReplica(primary);
});
after(async () => {
  await Promise.all([replica.close(), primary.close()]);
});

async function openStore(minReplicasAcked: number): Promise<RedisStateStore> {
  const store = new RedisStateStore({
    topology: { mode: 'standalone', url: primary.url },
    accountTag: accountTag('https://gateway.test', 'merchant@example.test'),
    commandTimeoutMs: COMMAND_TIMEOUT_MS,
    minReplicasAcked,
  });
  assert.equal(await store.whenAvailable(5_000), true, 'the store connects');
  return store;
}

/** The keys' records on the primary (their leases, named after each claim, expire on their own within a lease). */
async function claimKeys(): Promise<string[]> {
  return (await primary.cli('KEYS', '*idempotency:*')).filter((line) => line !== '' && !line.includes(':lease:'));
}

describe('SIDECAR_REDIS_MIN_REPLICAS_ACKED', () => {
  it('the move to sending and the answer are on the replica when the keeper returns', async () => {
    const store = await openStore(1);
    try {
      const { keeper } = keeperOn(store);
      const key = freshKey();
      const claim = await keeper.claim(key, 'fp', 'req-1');
      assert.equal(claim.kind, 'new');
      if (claim.kind !== 'new') return;
      await keeper.markSending(claim.ticket);
      const onReplica = async () => (await replica.cli('KEYS', `*idempotency:${key.sha256}`)).filter(Boolean);
      const [sendingKey] = await onReplica();
      assert.match(
        (await replica.cli('GET', sendingKey ?? '')).join('\n'),
        /"stage":"sending"/,
        'the fence is on the replica before the first byte would be sent',
      );
      await keeper.complete(claim.ticket, gatewayAnswer);
      const [storeKey] = await onReplica();
      assert.match((await replica.cli('GET', storeKey ?? '')).join('\n'), /"state":"done"/);
    } finally {
      await store.close();
    }
  });

  it('replica stopped: the move to sending is refused as unavailable and the claim released; 0 waits for nobody', async () => {
    const acked = await openStore(1);
    const unacked = await openStore(0);
    try {
      await replica.stop();
      await replicasConnected(0);
      const before = await claimKeys();
      const { keeper } = keeperOn(acked);
      const claim = await keeper.claim(freshKey(), 'fp', 'req-2');
      assert.equal(claim.kind, 'new', 'a claim alone waits for no replica: nothing is sent on it');
      if (claim.kind !== 'new') return;
      await assert.rejects(keeper.markSending(claim.ticket), { code: 'sidecar.idempotency.unavailable' });
      await keeper.release(claim.ticket);
      assert.deepEqual(await claimKeys(), before, 'the claim is deleted: a retry is not answered 409');
      assert.equal((await keeperOn(unacked).keeper.claim(freshKey(), 'fp', 'req-3')).kind, 'new');
    } finally {
      await Promise.all([acked.close(), unacked.close()]);
      await replica.start();
      await replicasConnected(1);
    }
  });

  it('a sidecar with MIN_REPLICAS_ACKED=1 and its replica stopped: keyed 503 retryable, nothing sent', async () => {
    const gateway = await new RecordingGateway().start();
    const env = {
      SIDECAR_STATE_STORE: 'redis',
      SIDECAR_REDIS_URL: primary.url,
      SIDECAR_REDIS_COMMAND_TIMEOUT_MS: String(COMMAND_TIMEOUT_MS),
      SIDECAR_REDIS_MIN_REPLICAS_ACKED: '1',
    };
    // The gateway is stopped whatever fails, the sidecar's start included: a server left listening keeps this
    // file's process, and so the suite, from ever ending.
    try {
      const running = await startTestSidecar(await sidecarEnv(keys, gateway.url, env));
      try {
        await waitUntilReady(running.sidecar);
        const sent = await send(running.sidecar.egressUrl, newKey(), freshDeposit());
        assert.equal(sent.status, 201, 'with the replica up a keyed request goes through');
        gateway.requests.length = 0;
        await replica.stop();
        await replicasConnected(0);
        await assertKeyedRefusedUnkeyedSent(running.sidecar.egressUrl, gateway);
      } finally {
        await running.stop();
        await replica.start();
      }
    } finally {
      await gateway.stop();
    }
  });
});
