// Acknowledged writes when one of their connections drops. A WAIT counts only the writes of the connection it runs
// on: one sent after node-redis reconnected would confirm a write it never saw, so a reconnect between a write and
// its WAIT's answer refuses the write. And one connection down is no outage of the store: the writes go to the
// others. A primary and one replica, real redis-server processes on 127.0.0.1; connections are dropped with
// CLIENT KILL, and held down by holding their next AUTH (the password is read at each connection attempt).
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { ACKNOWLEDGED_WRITE_CONNECTIONS } from '../../src/state/link-pool.js';
import { setTimeout as sleep } from 'node:timers/promises';
import type { HeldConnection, RedisConnectionOptions, RedisLink } from '../../src/state/redis-client.js';
import { accountTag } from '../../src/state/redis-keys.js';
import { RedisStateStore } from '../../src/state/redis-store.js';
import { StateStoreUnavailableError } from '../../src/state/state-store.js';
import {
  acknowledgedWrite,
  acknowledgingWrapped,
  assertReplacedConnectionRefused,
  connectionId,
  heldWith,
  holdingWith,
  Reconnects,
} from '../support/reconnecting-link.js';
import { SIDECAR_ACL_RULES, startRedis, startReplica, type TestRedis } from '../support/redis-server.js';
import { waitFor } from '../support/wait-for.js';

const COMMAND_TIMEOUT_MS = 2_000;

let primary: TestRedis;
let replica: TestRedis;

before(async () => {
  // CLIENT INFO: the test's own way to name a connection of the store to CLIENT KILL (the sidecar never sends it).
  primary = await startRedis({ user: true, acl: [...SIDECAR_ACL_RULES, '+client|info'] });
  replica = await startReplica(primary);
});
after(async () => {
  await Promise.all([replica.close(), primary.close()]);
});

interface OpenedStore {
  readonly store: RedisStateStore;
  /** The acknowledging links, in the order made. */
  readonly acknowledging: RedisLink[];
  /** Until released, no connection of the store can log in (it stays down once dropped). */
  holdLogins(): () => void;
  readonly availability: boolean[];
}

async function openStore(wrap: (link: RedisLink) => RedisLink = (link) => link): Promise<OpenedStore> {
  const links: RedisLink[] = [];
  let login: Promise<void> = Promise.resolve();
  const options: RedisConnectionOptions = {
    topology: { mode: 'standalone', url: primary.url },
    username: primary.username,
    password: async () => {
      await login;
      return primary.password ?? '';
    },
  };
  const store = new RedisStateStore({
    ...options,
    accountTag: accountTag('https://gateway.test', 'merchant@example.test'),
    commandTimeoutMs: COMMAND_TIMEOUT_MS,
    minReplicasAcked: 1,
    createLink: acknowledgingWrapped(wrap, links),
  });
  assert.equal(await store.whenAvailable(5_000), true, 'the store connects');
  await waitFor('every connection is up', () => links.every((link) => link.isReady), 10_000);
  const availability: boolean[] = [];
  store.onAvailabilityChange((available) => availability.push(available));
  const acknowledging = links.slice(1);
  assert.equal(acknowledging.length, ACKNOWLEDGED_WRITE_CONNECTIONS);
  const holdLogins = () => {
    let release = () => {};
    login = new Promise((resolve) => (release = resolve));
    return release;
  };
  return { store, acknowledging, holdLogins, availability };
}

describe('an acknowledged write whose connection is replaced before its WAIT answers', () => {
  for (const at of ['after the write', 'before the WAIT'] as const) {
    it(`is refused when node-redis reconnects ${at}; the same write without a reconnect is acknowledged`, async () => {
      const reconnects = new Reconnects(primary);
      const opened = await openStore(reconnects.wrap);
      try {
        await assertReplacedConnectionRefused(opened.store, reconnects, at);
        assert.deepEqual(opened.availability, [], 'one connection dropping is no outage of the store');
      } finally {
        await opened.store.close();
      }
    });
  }
});

describe('a failed acknowledged write that lands late', () => {
  it("its clean-up goes on the write's own connection, after it: nothing is left behind", async () => {
    // The next write's connection is held up server-side first (a WAIT for more replicas than there are, on that
    // same connection): the write reaches Redis only after the store gave up on it, as on a congested link.
    const blockMs = COMMAND_TIMEOUT_MS + 1_000;
    let armed = false;
    const congested = (link: RedisLink): RedisLink => {
      const hold = async (key: string): Promise<HeldConnection> => {
        const held = await link.hold(key);
        const blockFirst = () => {
          if (!armed) return;
          armed = false;
          void held.wait(5, blockMs).catch(() => undefined);
        };
        return heldWith(held, {
          setIfAbsent: (...args) => (blockFirst(), held.setIfAbsent(...args)),
          evalSha: (...args) => (blockFirst(), held.evalSha(...args)),
        });
      };
      return holdingWith(link, hold);
    };
    const { store } = await openStore(congested);
    try {
      const key = `late-claim:${Date.now()}`;
      armed = true;
      await assert.rejects(
        store.writeIf([{ key, holds: undefined }], [{ key, value: 'mine', ttlMs: 60_000 }], { acknowledged: true }),
        StateStoreUnavailableError,
      );
      // The claim's clean-up, as the idempotency keeper makes it: only while the key holds this claim's value.
      await store.compareAndDelete(key, 'mine');
      await sleep(blockMs);
      assert.equal(await store.get(key), undefined, 'the late write did not outlive its clean-up');
    } finally {
      await store.close();
    }
  });
});

describe('acknowledging connections down', () => {
  it('one down: the store stays available and acknowledged writes go to the others; all down: refused', async () => {
    const opened = await openStore();
    const { store, acknowledging } = opened;
    const release = opened.holdLogins();
    try {
      const [first, ...others] = acknowledging;
      assert.ok(first !== undefined);
      await primary.cli('CLIENT', 'KILL', 'ID', (await connectionId(first, 'any', primary)) ?? '');
      await waitFor('the killed link is down', () => !first.isReady, 10_000);
      for (let i = 0; i < 2 * ACKNOWLEDGED_WRITE_CONNECTIONS; i++) {
        assert.equal(await acknowledgedWrite(store), true, `acknowledged write ${i} with one connection down`);
      }
      assert.equal(first.isReady, false, 'the link was down all along');
      assert.equal(store.isAvailable(), true);
      assert.deepEqual(opened.availability, [], 'the store never counted as unavailable');

      for (const link of others)
        await primary.cli('CLIENT', 'KILL', 'ID', (await connectionId(link, 'any', primary)) ?? '');
      await waitFor('no acknowledging link is connected', () => acknowledging.every((link) => !link.isReady), 10_000);
      await waitFor('the store counts as unavailable', () => !store.isAvailable(), 10_000);
      assert.equal(await acknowledgedWrite(store), false, 'no connection for an acknowledged write: refused');

      release();
      assert.equal(await store.whenAvailable(10_000), true, 'available again once a link logs in');
      assert.equal(await acknowledgedWrite(store), true);
    } finally {
      release();
      await store.close();
    }
  });
});
