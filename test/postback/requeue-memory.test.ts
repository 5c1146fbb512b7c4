// The requeue memory on a real Redis inbox: what a replica accepted it holds until it sees it delivered (by itself at
// once, by another replica at the next lookup), within its size bound (oldest dropped, counted); a lookup after a
// wipe lets nothing go, and the wipe appends again what is held, under the same ids, oldest first.
import assert from 'node:assert/strict';
import { after, describe, test } from 'node:test';
import { Registry } from 'prom-client';
import { createLogger } from '../../src/observability/log.js';
import { InboxMetrics } from '../../src/observability/postback-metrics.js';
import { RedisInbox, type NewPostback, type PostbackInbox } from '../../src/postback/inbox.js';
import { RequeueMemory } from '../../src/postback/requeue-memory.js';
import { accountTag } from '../../src/state/redis-keys.js';
import { RedisStateStore } from '../../src/state/redis-store.js';
import { StoreEpoch } from '../../src/state/store-epoch.js';
import { startRedis, startReplica, type TestRedis } from '../support/redis-server.js';
import { CapturedOutput } from '../support/sidecar.js';
import { waitFor } from '../support/wait-for.js';

const cleanups: Array<() => Promise<void>> = [];
after(async () => {
  for (const cleanup of cleanups.reverse()) await cleanup().catch(() => undefined);
});

const TAG = accountTag('https://gateway.test', 'merchant@example.test');

interface Replica {
  readonly store: RedisStateStore;
  readonly inbox: PostbackInbox;
  readonly memory: RequeueMemory;
  readonly epoch: StoreEpoch;
  readonly registry: Registry;
  readonly logs: CapturedOutput;
}

interface ReplicaOptions {
  readonly maxBytes?: number;
  /** SIDECAR_REDIS_MIN_REPLICAS_ACKED. */
  readonly minReplicasAcked?: number;
  /** SIDECAR_REDIS_COMMAND_TIMEOUT_MS (a WAIT's own timeout is half of it). */
  readonly commandTimeoutMs?: number;
}

async function replica(redis: TestRedis, options: ReplicaOptions = {}): Promise<Replica> {
  const { maxBytes = 1_000_000, minReplicasAcked = 0, commandTimeoutMs = 2_000 } = options;
  const store = new RedisStateStore({
    topology: { mode: 'standalone', url: redis.url },
    accountTag: TAG,
    commandTimeoutMs,
    minReplicasAcked,
  });
  assert.equal(await store.whenAvailable(5_000), true);
  const logs = new CapturedOutput();
  const log = createLogger('info', logs);
  const registry = new Registry();
  // A check interval longer than the test: wipes are noticed when a lookup finds another epoch, or asked for.
  const epoch = new StoreEpoch(store, { log, onWiped: () => undefined, intervalMs: 600_000 });
  epoch.start();
  await waitFor('the epoch known', () => epoch.current() !== undefined, 5_000);
  const memory = new RequeueMemory(new RedisInbox(store), store, epoch, {
    maxBytes,
    metrics: new InboxMetrics(registry),
    log,
  });
  memory.start();
  const inbox = memory.wrap();
  await inbox.prepare();
  cleanups.push(async () => {
    memory.stop();
    epoch.stop();
    await store.close();
  });
  return { store, inbox, memory, epoch, registry, logs };
}

async function counter(registry: Registry, name: string): Promise<number> {
  const line = (await registry.metrics()).split('\n').find((l) => l.startsWith(`${name} `));
  return Number(line?.split(' ')[1] ?? Number.NaN);
}

let serial = 0;
function postback(transaction = `tx-${++serial}`, status = 'SUCCESS'): NewPostback {
  const n = ++serial;
  return {
    id: `pb_${n.toString(16).padStart(32, '0')}`,
    payload: JSON.stringify({ transaction_id: transaction, status, n }),
    headers: { 'x-request-id': `req-${n}` },
    orderKey: `postback:order:${transaction}`,
  };
}

/** Everything the inbox has for a consumer now, delivered (its outcome recorded as such) by `by`. */
async function deliverAll(by: Replica): Promise<string[]> {
  const taken = await by.inbox.read('test-consumer', 100, Date.now());
  for (const item of taken) assert.equal(await by.inbox.record(item, { outcome: 'delivered' }, Date.now()), true);
  return taken.map((item) => item.id);
}

describe('the requeue memory', { timeout: 60_000 }, () => {
  test('held until seen delivered: at once when this replica delivers, at the next lookup when another does', async () => {
    const redis = await startRedis();
    cleanups.push(() => redis.close());
    const [a, b] = [await replica(redis), await replica(redis)];
    const [first, second] = [postback(), postback()];
    assert.equal(await a.inbox.append(first, Date.now()), 'accepted');
    assert.equal(await a.inbox.append(second, Date.now()), 'accepted');
    assert.equal(a.memory.size().postbacks, 2);
    // b delivers both (a's own delivery would let go at once): a still holds them until it looks.
    assert.deepEqual((await deliverAll(b)).sort(), [first.id, second.id].sort());
    assert.equal(a.memory.size().postbacks, 2);
    await a.memory.lookUpNow();
    assert.deepEqual(a.memory.size(), { postbacks: 0, bytes: 0 });
    // a delivers one of its own: let go without a lookup.
    const third = postback();
    await a.inbox.append(third, Date.now());
    assert.deepEqual(await deliverAll(a), [third.id]);
    assert.equal(a.memory.size().postbacks, 0);
  });

  test('an older copy of the dataset (a restart from a snapshot): what it lacks is appended again, never taken for delivered', async () => {
    const redis = await startRedis();
    cleanups.push(() => redis.close());
    const [a, b] = [await replica(redis), await replica(redis)];
    const delivered = postback();
    await a.inbox.append(delivered, Date.now());
    assert.deepEqual(await deliverAll(b), [delivered.id]);
    await a.memory.lookUpNow();
    assert.equal(a.memory.size().postbacks, 0, 'delivered by another replica: its settled mark lets it go');
    // The snapshot a restarted node loads; then three more accepted, and one of them delivered, after it.
    assert.deepEqual(await redis.cli('SAVE'), ['OK']);
    const later = [postback('tx-r', 'SUCCESS'), postback('tx-r', 'FAILED'), postback()];
    for (const item of later) assert.equal(await a.inbox.append(item, Date.now()), 'accepted');
    const before = a.epoch.current();
    await redis.crash();
    await redis.start();
    await waitFor('the store back', () => a.store.isAvailable(), 10_000);
    // The epoch is the snapshot's, the same: only the lookup can tell. Absent and unsettled is lost, not delivered.
    await a.memory.lookUpNow();
    assert.equal(a.epoch.current(), before, 'this replica has not checked its epoch since');
    await waitFor(
      'three appended again',
      async () => (await counter(a.registry, 'signing_sidecar_postback_requeued_total')) === 3,
      5_000,
    );
    assert.match(a.logs.text, /"event":"postback.inbox_lost"[^\n]*"postbacks":3/);
    assert.equal(a.memory.size().postbacks, 3, 'held until delivered');
    await a.inbox.prepare();
    const taken = await a.inbox.read('after-rollback', 100, Date.now());
    assert.deepEqual(
      taken.map((item) => item.id),
      [later[0]!.id, later[2]!.id],
      "in arrival order, the transaction's second behind its first",
    );
    for (const item of taken) await a.inbox.record(item, { outcome: 'delivered' }, Date.now());
    assert.equal(a.memory.size().postbacks, 1, "its own deliveries let go at once; the transaction's second waits");
  });

  test('a wipe: the lookup lets nothing go, and everything held is appended again, same ids, in arrival order', async () => {
    const redis = await startRedis();
    cleanups.push(() => redis.close());
    const a = await replica(redis);
    const held = [postback('tx-w', 'SUCCESS'), postback('tx-w', 'FAILED'), postback()];
    for (const item of held) assert.equal(await a.inbox.append(item, Date.now()), 'accepted');
    const before = a.epoch.current();
    assert.deepEqual(await redis.cli('FLUSHALL'), ['OK']);
    // The lookup finds no epoch: a wipe, not three deliveries.
    await a.memory.lookUpNow();
    await waitFor('the epoch replaced', () => a.epoch.current() !== before, 5_000);
    await waitFor(
      'three appended again',
      async () => (await counter(a.registry, 'signing_sidecar_postback_requeued_total')) === 3,
      5_000,
    );
    assert.equal(a.memory.size().postbacks, 3, 'still held: not delivered yet');
    await a.inbox.prepare(); // the group went with the wipe
    const taken = await a.inbox.read('after-wipe', 100, Date.now());
    // The transaction's second postback waits behind its first, as before the wipe.
    assert.deepEqual(
      taken.map((item) => item.id),
      [held[0]!.id, held[2]!.id],
    );
    assert.deepEqual(
      taken.map((item) => item.payload),
      [held[0]!.payload, held[2]!.payload],
    );
    assert.match(a.logs.text, /"event":"postback.requeued"[^\n]*"postbacks":3/);
    // Once appended again under the new epoch, a lookup appends nothing more.
    await a.memory.lookUpNow();
    assert.equal(await counter(a.registry, 'signing_sidecar_postback_requeued_total'), 3);
  });

  test('a wipe while no replica can acknowledge: all held back on the primary at once, each once, counted when acknowledged', async () => {
    const redis = await startRedis();
    cleanups.push(() => redis.close());
    let follower = await startReplica(redis);
    cleanups.push(() => follower.close());
    // Writes wait for one replica, each WAIT up to 1 s (half the command timeout).
    const acked = { minReplicasAcked: 1, commandTimeoutMs: 2_000 };
    const [a, b] = [await replica(redis, acked), await replica(redis, acked)];
    // Five transactions, four postbacks each: each transaction's wait in its line behind its first.
    const held = Array.from({ length: 20 }, (_, i) => postback(`tx-line-${i % 5}`));
    for (const item of held) assert.equal(await a.inbox.append(item, Date.now()), 'accepted');
    await follower.close(); // as after a restart, until the replicas have resynchronised: every WAIT fails
    // Other acknowledged writes of a's go on meanwhile, each holding its connection for its WAIT.
    let writing = true;
    const writers = Array.from({ length: 4 }, async (_, w) => {
      for (let i = 0; writing; i++) {
        await a.store.setIfAbsent(`load:${w}:${i}`, 'v', 60_000, { acknowledged: true }).catch(() => undefined);
      }
    });
    const before = a.epoch.current();
    assert.deepEqual(await redis.cli('FLUSHALL'), ['OK']);
    await a.memory.lookUpNow();
    await waitFor('the epoch replaced', () => a.epoch.current() !== before, 5_000);
    // All twenty on the primary at once: appended one at a time behind a WAIT each, only the first would be, and
    // a's death meanwhile would lose the other nineteen.
    const kept = async () => (await redis.cli('KEYS', '*postback:entry:*')).filter((line) => line !== '').length;
    await waitFor('all twenty back on the primary', async () => (await kept()) === 20, 900);
    // Another replica delivers each transaction's first while a's acknowledgement still fails.
    await b.inbox.prepare();
    const firsts = held.slice(0, 5).map((item) => item.id);
    assert.deepEqual(await deliverAll(b), firsts);
    await waitFor(
      'the acknowledgement failed, said once',
      () => /"event":"postback.requeue_retrying"/.test(a.logs.text),
      5_000,
    );
    assert.equal(await counter(a.registry, 'signing_sidecar_postback_requeued_total'), 0, 'not counted unacknowledged');
    writing = false;
    await Promise.all(writers);
    follower = await startReplica(redis);
    await waitFor(
      'counted once a replica acknowledges',
      async () => (await counter(a.registry, 'signing_sidecar_postback_requeued_total')) === 20,
      10_000,
    );
    assert.equal(a.logs.text.match(/"event":"postback.requeue_retrying"/g)?.length, 1);
    // The five delivered were not written again by a's retries (they would be delivered twice): fifteen kept, and
    // each transaction's second is next, in arrival order.
    assert.equal(await kept(), 15);
    const taken = await a.inbox.read('after-wipe', 100, Date.now());
    assert.deepEqual(
      taken.map((item) => item.id),
      held.slice(5, 10).map((item) => item.id),
    );
  });

  test('bounded: past SIDECAR_POSTBACK_REQUEUE_MEMORY_MB the oldest go first, counted and logged', async () => {
    const redis = await startRedis();
    cleanups.push(() => redis.close());
    const one = postback();
    // Room for about two postbacks of this size.
    const size = Buffer.byteLength(one.payload) + Buffer.byteLength(JSON.stringify(one.headers)) + 256;
    const a = await replica(redis, { maxBytes: size * 2 + 10 });
    const items = [one, postback(), postback(), postback()];
    for (const item of items) await a.inbox.append(item, Date.now());
    assert.equal(a.memory.size().postbacks, 2);
    assert.equal(await counter(a.registry, 'signing_sidecar_postback_requeue_memory_dropped_total'), 2);
    assert.match(a.logs.text, /"event":"postback.requeue_memory_full"/);
    // What is held is the newest: after a wipe those two come back, not the two dropped.
    assert.deepEqual(await redis.cli('FLUSHALL'), ['OK']);
    await a.epoch.check();
    await waitFor(
      'two appended again',
      async () => (await counter(a.registry, 'signing_sidecar_postback_requeued_total')) === 2,
      5_000,
    );
    await a.inbox.prepare();
    const taken = await a.inbox.read('after-wipe', 100, Date.now());
    assert.deepEqual(taken.map((item) => item.id).sort(), [items[2]!.id, items[3]!.id].sort());
  });
});
