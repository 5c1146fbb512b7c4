// Acknowledged writes on connections of their own: a WAIT that a slow replica holds up delays neither the store's
// other commands nor another caller's acknowledged write. A primary and one replica, real redis-server processes on
// 127.0.0.1; the replica is frozen (SIGSTOP), so every WAIT for it runs to its own timeout.
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { ACKNOWLEDGED_WRITE_CONNECTIONS } from '../../src/state/link-pool.js';
import { createRedisLink, type RedisLink } from '../../src/state/redis-client.js';
import { accountTag } from '../../src/state/redis-keys.js';
import { RedisStateStore } from '../../src/state/redis-store.js';
import { StateStoreUnavailableError } from '../../src/state/state-store.js';
import { startRedis, startReplica, type TestRedis } from '../support/redis-server.js';

// WAIT's own timeout is half of it: a second, long beside a command on 127.0.0.1 even on a loaded machine.
const COMMAND_TIMEOUT_MS = 2_000;
const WAIT_MS = COMMAND_TIMEOUT_MS / 2;
const TTL_MS = 60_000;

let primary: TestRedis;
let replica: TestRedis;

before(async () => {
  primary = await startRedis();
  replica = await startReplica(primary);
});
after(async () => {
  replica.thaw();
  await Promise.all([replica.close(), primary.close()]);
});

async function openStore(minReplicasAcked: number): Promise<RedisStateStore> {
  const links: RedisLink[] = [];
  const store = new RedisStateStore({
    topology: { mode: 'standalone', url: primary.url },
    accountTag: accountTag('https://gateway.test', 'merchant@example.test'),
    commandTimeoutMs: COMMAND_TIMEOUT_MS,
    minReplicasAcked,
    createLink: (options) => {
      const link = createRedisLink(options);
      links.push(link);
      return link;
    },
  });
  assert.equal(await store.whenAvailable(5_000), true, 'the store connects');
  // Available once one acknowledging connection is up; what follows counts on every one of them.
  const deadline = Date.now() + 5_000;
  while (!links.every((link) => link.isReady)) {
    if (Date.now() > deadline) throw new Error('a connection of the store never came up');
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
  return store;
}

/** How long `promise` took to settle, and whether it was rejected with the store's unavailable error. */
async function timed(promise: Promise<unknown>): Promise<{ ms: number; unavailable: boolean }> {
  const started = performance.now();
  const unavailable = await promise.then(
    () => false,
    (err: unknown) => err instanceof StateStoreUnavailableError,
  );
  return { ms: performance.now() - started, unavailable };
}

/** Until the primary shows a client blocked in WAIT (so what follows is sent while it is). */
async function waitIsBlocking(): Promise<void> {
  const deadline = Date.now() + 5_000;
  while (!(await primary.cli('CLIENT', 'LIST')).some((line) => / cmd=wait\b/.test(line) && / flags=b\b/.test(line))) {
    if (Date.now() > deadline) throw new Error('no WAIT was seen blocking on the primary');
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

const unique = () => `ack-test:${Math.random().toString(36).slice(2)}`;

describe('acknowledged writes on connections of their own', () => {
  it('a WAIT held up by a frozen replica delays neither reads, plain writes nor refused acknowledged writes', async () => {
    const store = await openStore(1);
    const held = unique();
    assert.equal(await store.setIfAbsent(held, 'first', TTL_MS, { acknowledged: true }), true);
    replica.freeze();
    try {
      const stuck = timed(store.compareAndSet(unique(), undefined, 'v', TTL_MS, { acknowledged: true }));
      await waitIsBlocking();
      const read = await timed(store.get(held));
      const plainWrite = await timed(store.compareAndSet(unique(), undefined, 'v', TTL_MS));
      // Acknowledged, but refused (the key is held): nothing written, so nothing to wait for.
      const refused = await timed(store.setIfAbsent(held, 'second', TTL_MS, { acknowledged: true }));
      for (const [what, { ms, unavailable }] of Object.entries({ read, plainWrite, refused })) {
        assert.equal(unavailable, false, `${what} answered`);
        assert.ok(ms < WAIT_MS / 2, `${what} took ${ms.toFixed(0)} ms while a WAIT of ${WAIT_MS} ms was blocked`);
      }
      const blocked = await stuck;
      assert.equal(blocked.unavailable, true, 'the write the replica never acknowledged is refused');
      assert.ok(blocked.ms >= WAIT_MS * 0.9, `it waited for the replica (${blocked.ms.toFixed(0)} ms)`);
      assert.equal(store.isAvailable(), true, 'slow replicas are no outage of the store');
    } finally {
      replica.thaw();
      await store.close();
    }
  });

  it('acknowledged writes of different callers wait for the replica side by side, not one after the other', async () => {
    const store = await openStore(1);
    replica.freeze();
    try {
      const writes = Array.from({ length: ACKNOWLEDGED_WRITE_CONNECTIONS }, () =>
        timed(store.writeIf([], [{ key: unique(), value: 'v', ttlMs: TTL_MS }], { acknowledged: true })),
      );
      const settled = await Promise.all(writes);
      for (const { ms, unavailable } of settled) {
        assert.equal(unavailable, true, 'refused: the replica acknowledged nothing');
        // One after the other, the second would end at twice WAIT's timeout, past the command timeout.
        assert.ok(ms < WAIT_MS * 1.6, `each took about one WAIT: ${settled.map((s) => s.ms.toFixed(0)).join(', ')}`);
      }
    } finally {
      replica.thaw();
      await store.close();
    }
  });

  it(`opens ${ACKNOWLEDGED_WRITE_CONNECTIONS} more connections only when writes wait for replicas`, async () => {
    const clients = async () => (await primary.cli('CLIENT', 'LIST')).filter((line) => line.includes(' cmd=')).length;
    const baseline = await clients();
    const plain = await openStore(0);
    const plainCount = (await clients()) - baseline;
    await plain.close();
    const deadline = Date.now() + 5_000;
    while ((await clients()) > baseline && Date.now() < deadline)
      await new Promise((resolve) => setTimeout(resolve, 20));
    const acked = await openStore(1);
    try {
      while ((await clients()) - baseline < plainCount + ACKNOWLEDGED_WRITE_CONNECTIONS && Date.now() < deadline) {
        await new Promise((resolve) => setTimeout(resolve, 20));
      }
      assert.equal(plainCount, 2, 'commands and pub/sub');
      assert.equal((await clients()) - baseline, 2 + ACKNOWLEDGED_WRITE_CONNECTIONS);
    } finally {
      await acked.close();
    }
  });
});
