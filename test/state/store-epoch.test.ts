// The store's epoch on a real redis-server: two replicas agree on it, a FLUSHALL or a restart without persistence is
// noticed by each (logged at error level, counted once, a new epoch they agree on), and a restart that kept the
// data (appendonly) or a plain reconnect is not taken for a wipe.
import assert from 'node:assert/strict';
import { after, describe, it } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { createLogger } from '../../src/observability/log.js';
import { accountTag } from '../../src/state/redis-keys.js';
import { RedisStateStore } from '../../src/state/redis-store.js';
import { STORE_EPOCH_KEY, StoreEpoch } from '../../src/state/store-epoch.js';
import { startRedis, startReplica, type TestRedis } from '../support/redis-server.js';
import { CapturedOutput } from '../support/sidecar.js';
import { waitFor } from '../support/wait-for.js';

const TAG = accountTag('https://gateway.test', 'merchant@example.test');
const cleanups: Array<() => Promise<void>> = [];
after(async () => {
  for (const cleanup of cleanups.reverse()) await cleanup().catch(() => undefined);
});

interface Replica {
  readonly store: RedisStateStore;
  readonly epoch: StoreEpoch;
  readonly logs: CapturedOutput;
  /** The epochs the wipe listener was told of, in order. */
  readonly heard: string[];
  wipes: number;
}

/**
 * One replica's store and epoch; `intervalMs` long shows that a check came from a reconnect, not the timer.
 * `minReplicasAcked`: its writes wait for that many Redis replicas, the generation's raise included.
 */
async function replica(redis: TestRedis, intervalMs = 200, minReplicasAcked = 0): Promise<Replica> {
  const store = new RedisStateStore({
    topology: { mode: 'standalone', url: redis.url },
    accountTag: TAG,
    commandTimeoutMs: 2_000,
    minReplicasAcked,
  });
  const logs = new CapturedOutput();
  const made: Replica = {
    store,
    logs,
    heard: [],
    wipes: 0,
    epoch: new StoreEpoch(store, {
      log: createLogger('info', logs),
      onWiped: () => made.wipes++,
      intervalMs,
    }),
  };
  made.epoch.onWipe((epoch) => made.heard.push(epoch));
  cleanups.push(async () => {
    made.epoch.stop();
    await store.close();
  });
  assert.equal(await store.whenAvailable(5_000), true);
  made.epoch.start();
  await waitFor('the epoch known', () => made.epoch.current() !== undefined, 5_000);
  return made;
}

const wipedLines = (r: Replica) => r.logs.lines().filter((line) => line.event === 'state_store.wiped');

describe('the store epoch', { timeout: 60_000 }, () => {
  it('two replicas share one epoch; FLUSHALL: each notices once, logs it at error level, both take one new epoch', async () => {
    const redis = await startRedis();
    cleanups.push(() => redis.close());
    const [a, b] = [await replica(redis), await replica(redis)];
    const first = a.epoch.current();
    assert.equal(b.epoch.current(), first, 'the second replica takes the epoch the first wrote');
    await sleep(600); // several checks: an unchanged epoch is no wipe
    assert.deepEqual([a.wipes, b.wipes], [0, 0]);

    assert.deepEqual(await redis.cli('FLUSHALL'), ['OK']);
    await waitFor('both replicas to notice', () => a.wipes === 1 && b.wipes === 1, 5_000);
    await sleep(600);
    assert.deepEqual([a.wipes, b.wipes], [1, 1], 'one wipe, counted once by each');
    const second = a.epoch.current();
    assert.notEqual(second, first);
    assert.equal(b.epoch.current(), second, 'the replica that noticed second takes the epoch the first wrote');
    assert.deepEqual(a.heard, [second]);
    assert.deepEqual(b.heard, [second]);
    assert.deepEqual(await redis.cli('--raw', 'GET', `signing-sidecar:{${TAG}}:${STORE_EPOCH_KEY}`), [second]);
    for (const r of [a, b]) {
      const [line] = wipedLines(r);
      assert.equal(line?.level, 50, 'error level');
      assert.deepEqual(line?.lost, [
        'idempotency_keys',
        'token_record',
        'token_lock',
        'postback_inbox',
        'postback_memory',
      ]);
      assert.match(String(line?.msg), /runbook-state-store-wiped/);
    }
  });

  it('a restart without persistence is noticed at the reconnect; a restart with appendonly, or a reconnect, is not a wipe', async () => {
    const kept = await startRedis({ args: ['--appendonly', 'yes', '--appendfsync', 'always'] });
    const empty = await startRedis();
    cleanups.push(
      () => kept.close(),
      () => empty.close(),
    );
    // A check interval far longer than the test: what is noticed here, is noticed at the reconnect.
    const [onKept, onEmpty] = [await replica(kept, 600_000), await replica(empty, 600_000)];
    await kept.restart();
    await empty.restart();
    await waitFor('the restart without persistence noticed', () => onEmpty.wipes === 1, 10_000);
    await waitFor('the other store back', () => onKept.store.isAvailable(), 10_000);
    await sleep(500);
    assert.equal(onKept.wipes, 0, 'the data came back from the AOF: no wipe');
    assert.equal(wipedLines(onKept).length, 0);
    assert.equal(wipedLines(onEmpty).length, 1);
  });

  it('a restart from an older snapshot (the same epoch, writes since gone) is noticed as a wipe by a replica that saw newer', async () => {
    const redis = await startRedis();
    cleanups.push(() => redis.close());
    const [a, b] = [await replica(redis), await replica(redis)];
    const first = a.epoch.current();
    // The snapshot a restarted node would load (RDB, Redis's default persistence), then checks after it.
    assert.deepEqual(await redis.cli('SAVE'), ['OK']);
    await sleep(600);
    assert.deepEqual([a.wipes, b.wipes], [0, 0]);
    await redis.crash();
    await redis.start();
    assert.deepEqual(
      await redis.cli('--raw', 'GET', `signing-sidecar:{${TAG}}:${STORE_EPOCH_KEY}`),
      [first],
      'the older copy holds the same epoch: no different from no wipe at all, but for the generation',
    );
    await waitFor('both replicas to notice', () => a.wipes === 1 && b.wipes === 1, 10_000);
    await sleep(600);
    assert.deepEqual([a.wipes, b.wipes], [1, 1], 'once each');
    assert.notEqual(a.epoch.current(), first);
    assert.equal(b.epoch.current(), a.epoch.current(), 'one new epoch for both');
    const losses = [a, b].map((r) => wipedLines(r)[0]?.loss).sort();
    // The first to check finds the generation no higher than it saw; the other finds the epoch it replaced.
    assert.ok(losses.includes('rolled_back'), `one replica tells the rollback: ${losses.join(', ')}`);
    assert.match(a.logs.text, /runbook-state-store-wiped/);
  });

  it('a rollback is noticed while the Redis replicas cannot acknowledge yet (resynchronising), not raised past', async () => {
    const redis = await startRedis();
    const follower = await startReplica(redis);
    cleanups.push(
      () => redis.close(),
      async () => {
        follower.thaw();
        await follower.close();
      },
    );
    const [a, b] = [await replica(redis, 200, 1), await replica(redis, 200, 1)];
    const first = a.epoch.current();
    assert.deepEqual(await redis.cli('SAVE'), ['OK']);
    await sleep(1_000); // raises the replicas saw acknowledged, after the snapshot
    // Right after the restart from the snapshot no replica acknowledges: every raise's WAIT would fail. Raised
    // anyway, checks every 200 ms would lift the counter past what the replicas saw before the replica came back.
    follower.freeze();
    await redis.crash();
    await redis.start();
    await waitFor('both replicas to notice, the follower still frozen', () => a.wipes === 1 && b.wipes === 1, 10_000);
    follower.thaw();
    assert.notEqual(a.epoch.current(), first);
    assert.ok(
      [a, b].some((r) => wipedLines(r)[0]?.loss === 'rolled_back'),
      'one replica tells the rollback',
    );
  });
});
