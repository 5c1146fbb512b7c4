import assert from 'node:assert/strict';
import { createSecretKey, randomBytes } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import type { RecordRejected } from '../../src/state/record-mac.js';
import { accountTag } from '../../src/state/redis-keys.js';
import { RedisStateStore } from '../../src/state/redis-store.js';
import { StateStoreUnavailableError } from '../../src/state/state-store.js';
import { startRedis, type TestRedis } from '../support/redis-server.js';
import { describeKeeperContract, freshKey, gatewayAnswer, keeperOn } from './keeper-contract.js';

let redis: TestRedis;
before(async () => {
  redis = await startRedis();
});
after(async () => {
  await redis.close();
});

const ACCOUNT = accountTag('https://gateway.test', 'merchant@example.test');
const SIGNED = {
  keys: [createSecretKey(randomBytes(32))],
  acceptUnsigned: false,
  onRejected: (rejected: RecordRejected) => assert.fail(`a genuine record was refused: ${JSON.stringify(rejected)}`),
};

async function openStore(signed = false): Promise<RedisStateStore> {
  const store = new RedisStateStore({
    topology: { mode: 'standalone', url: redis.url },
    accountTag: ACCOUNT,
    // A healthy Redis throughout: room for a loaded machine's stalls, which would read as the store being away.
    commandTimeoutMs: 1_000,
    ...(signed ? { recordMac: SIGNED } : {}),
  });
  assert.equal(await store.whenAvailable(5_000), true, 'the store connects');
  return store;
}

describeKeeperContract('Redis', openStore);
// The same protocol with every record signed and checked (SIDECAR_STATE_MAC_KEY_FILE): real records round-trip.
describeKeeperContract('Redis, records signed', () => openStore(true));

describe('idempotency protocol on Redis: two replicas, one Redis', () => {
  it('a key answered through one replica is replayed through another', async () => {
    const [one, two] = await Promise.all([openStore(), openStore()]);
    try {
      const key = freshKey();
      const claim = await keeperOn(one).keeper.claim(key, 'fp', 'req-1');
      assert.equal(claim.kind, 'new');
      assert.deepEqual(await keeperOn(two).keeper.claim(key, 'fp', 'req-2'), { kind: 'in_progress' });
      if (claim.kind === 'new') await keeperOn(one).keeper.complete(claim.ticket, gatewayAnswer);
      assert.deepEqual(await keeperOn(two).keeper.claim(key, 'fp', 'req-3'), {
        kind: 'replayed',
        answer: gatewayAnswer,
      });
    } finally {
      await Promise.all([one.close(), two.close()]);
    }
  });

  it('Redis down: a claim rejects as unavailable (the request must not be sent)', async () => {
    const store = await openStore();
    try {
      await redis.stop();
      await assert.rejects(keeperOn(store).keeper.claim(freshKey(), 'fp', 'req-1'), StateStoreUnavailableError);
    } finally {
      await redis.start();
      await store.close();
    }
  });
});
