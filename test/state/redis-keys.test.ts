// Every key of one account is in one Redis Cluster slot: what a script or a transaction on several of them needs,
// and what keeps one account's state on one shard. Checked by Redis itself (CLUSTER KEYSLOT on a cluster-enabled
// redis-server), not by our own hash.
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { accountTag, DEFAULT_REDIS_KEY_PREFIX, RedisKeys } from '../../src/state/redis-keys.js';
import { freeStablePort } from '../support/free-port.js';
import { startRedis, type TestRedis } from '../support/redis-server.js';

let redis: TestRedis;
before(async () => {
  // The cluster bus listens on the node's port + 10000 unless told otherwise, a port that may fall in the ephemeral
  // range and be taken (as startCluster does, a free one is given).
  redis = await startRedis({ args: ['--cluster-enabled', 'yes', '--cluster-port', String(await freeStablePort())] });
});
after(async () => {
  await redis.close();
});

async function slotOf(key: string): Promise<string> {
  const [slot = ''] = await redis.cli('CLUSTER', 'KEYSLOT', key);
  return slot;
}

describe('Redis keys and hash tags', () => {
  it("every key and channel of one account is in the account's slot; another account's are elsewhere", async () => {
    const tag = accountTag('https://gateway.test', 'merchant@example.test');
    const keys = new RedisKeys(DEFAULT_REDIS_KEY_PREFIX, tag);
    // The names the token, the postback receiver and the idempotency keeper use (a nonce is the gateway's text,
    // braces included).
    const names = [
      'token:record',
      'token:lock',
      'token:login-cooldown',
      'postback:nonce:n{with}braces',
      `postback:inflight:${'a'.repeat(64)}`,
      `postback:delivered:${'a'.repeat(64)}`,
      `idempotency:${'b'.repeat(64)}`,
    ];
    const slots = new Set(await Promise.all(names.map((name) => slotOf(keys.key(name)))));
    slots.add(await slotOf(keys.channel('token:generation')));
    assert.deepEqual([...slots], [await slotOf(tag)]);
    const other = new RedisKeys(DEFAULT_REDIS_KEY_PREFIX, accountTag('https://gateway.test', 'other@example.test'));
    assert.notEqual(await slotOf(other.key('token:record')), await slotOf(tag));
  });

  it('a prefix or a tag with braces is refused: it would move the hash tag', () => {
    assert.throws(() => new RedisKeys('app{x}:', 'abc'), RangeError);
    assert.throws(() => new RedisKeys('app:', 'a}b'), RangeError);
  });
});
