// The fleet token on a real redis-server ("two replicas refreshing at the same moment"): each replica
// with its own connections, as pods have, so the lock, the compare-and-set script and the publication are Redis's.
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { accountTag } from '../../src/state/redis-keys.js';
import { RedisStateStore } from '../../src/state/redis-store.js';
import { TOKEN_RECORD_KEY, decodeRecord } from '../../src/token/fleet-record.js';
import { startRedis, type TestRedis } from '../support/redis-server.js';
import { FAST, StrictGateway, replica, type Replica } from './fleet-support.js';
import { waitFor } from '../support/wait-for.js';

/** A loaded CI machine can stall the event loop past the 100 ms default; these tests are not about timeouts. */
const RELAXED_MS = 2_000;

describe('fleet token on Redis', () => {
  let redis: TestRedis;
  const stores: RedisStateStore[] = [];
  const running: Replica[] = [];
  before(async () => {
    redis = await startRedis();
  });
  after(async () => {
    for (const r of running) r.tokens.stop();
    for (const store of stores) await store.close();
    await redis.close();
  });

  async function pod(gateway: StrictGateway, tag: string): Promise<Replica> {
    const store = new RedisStateStore({
      topology: { mode: 'standalone', url: redis.url },
      accountTag: tag,
      commandTimeoutMs: RELAXED_MS,
    });
    stores.push(store);
    assert.equal(await store.whenAvailable(5_000), true, 'connected to Redis');
    const r = replica(store, gateway, FAST, { refreshAheadSeconds: 60 });
    running.push(r);
    r.tokens.start();
    return r;
  }

  it('two replicas refreshing at the same moment: one refresh reaches the gateway, no refresh token twice', async () => {
    const gateway = new StrictGateway();
    const tag = accountTag('https://gateway.test', 'same-moment@example.test');
    const [a, b] = await Promise.all([pod(gateway, tag), pod(gateway, tag)]);
    await waitFor('both on one token', () => a.tokens.hasValidToken() && b.tokens.hasValidToken());
    assert.equal(gateway.logins(), 1, 'one login for both');
    // Both get a 401 FAILED for the token they share, at once.
    const fresh = await Promise.all(
      [a, b].map((r) => r.tokens.tokenAfterRejection(r.tokens.usableToken()!.generation)),
    );
    assert.deepEqual(
      gateway.calls.map((c) => c.grant),
      ['password', 'refresh_token'],
    );
    assert.equal(fresh[0]!.accessToken.reveal(), fresh[1]!.accessToken.reveal());
    assert.equal(gateway.accepts(fresh[0]!.accessToken), true);
    const stored = decodeRecord(await stores[0]!.get(TOKEN_RECORD_KEY));
    assert.equal(stored?.accessToken.reveal(), fresh[0]!.accessToken.reveal(), 'the record in Redis');
    assert.equal(stored?.generation, 2);
  });
});
