// Acknowledged writes when one of their connections drops. A WAIT counts only the writes of the connection it runs
// on: one sent after node-redis reconnected would confirm a write it never saw, so a reconnect between a write and
// its WAIT's answer refuses the write. And one connection down is no outage of the store: the writes go to the
// others. A primary and one replica, real redis-server processes on 127.0.0.1; connections are dropped with
// CLIENT KILL, and held down by holding their next AUTH (the password is read at each connection attempt).
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { ACKNOWLEDGED_WRITE_CONNECTIONS } from '../../src/state/link-pool.js';
import {
  createRedisLink,
  type HeldConnection,
  type RedisConnectionOptions,
  type RedisLink,
} from '../../src/state/redis-client.js';
import { accountTag } from '../../src/state/redis-keys.js';
import { RedisStateStore } from '../../src/state/redis-store.js';
import { StateStoreUnavailableError } from '../../src/state/state-store.js';
import { SIDECAR_ACL_RULES, startRedis, startReplica, type TestRedis } from '../support/redis-server.js';

const COMMAND_TIMEOUT_MS = 2_000;
const TTL_MS = 60_000;

let primary: TestRedis;
let replica: TestRedis;

before(async () => {
  // CLIENT ID: the test's own way to name a connection of the store to CLIENT KILL (the sidecar never sends it).
  primary = await startRedis({ user: true, acl: [...SIDECAR_ACL_RULES, '+client|id'] });
  replica = await startReplica(primary);
});
after(async () => {
  await Promise.all([replica.close(), primary.close()]);
});

async function until(what: string, done: () => boolean | Promise<boolean>): Promise<void> {
  const deadline = Date.now() + 10_000;
  while (!(await done())) {
    if (Date.now() > deadline) throw new Error(`never: ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

/** The server's id of the connection `link` sends its commands on now (undefined while it has none). */
async function connectionId(link: RedisLink): Promise<string | undefined> {
  try {
    return String(await link.command('any', ['CLIENT', 'ID']));
  } catch {
    return undefined;
  }
}

/** Drops the connection `link` is on, and resolves once node-redis has connected it again (a new connection). */
async function reconnect(link: RedisLink): Promise<void> {
  const before = await connectionId(link);
  assert.ok(before !== undefined, 'the link is connected');
  await primary.cli('CLIENT', 'KILL', 'ID', before);
  await until('the link is on a new connection', async () => {
    const now = await connectionId(link);
    return now !== undefined && now !== before;
  });
}

/** When, in an acknowledged write, the connection is dropped and connected again: not at all, or at that step. */
type ReconnectAt = 'never' | 'after the write' | 'before the WAIT';

/** `link`, its held connections dropped and reconnected at `at()` (the moment a test needs it, deterministically). */
function reconnecting(link: RedisLink, at: () => ReconnectAt, reconnects: string[]): RedisLink {
  const hold = async (key: string): Promise<HeldConnection> => {
    const held = await link.hold(key);
    const step = async (when: ReconnectAt) => {
      if (at() !== when) return;
      await reconnect(link);
      reconnects.push(when);
    };
    return {
      get replaced() {
        return held.replaced;
      },
      setIfAbsent: async (...args) => {
        const written = await held.setIfAbsent(...args);
        await step('after the write');
        return written;
      },
      evalSha: (...args) => held.evalSha(...args),
      eval: (...args) => held.eval(...args),
      wait: async (...args) => {
        await step('before the WAIT');
        return held.wait(...args);
      },
    };
  };
  return new Proxy(link, {
    get: (target, property, receiver): unknown =>
      property === 'hold' ? hold : (Reflect.get(target, property, receiver) as unknown),
  });
}

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
    createLink: (linkOptions) => {
      const link = createRedisLink(linkOptions);
      links.push(link);
      // The first is the store's commands connection; the acknowledging links follow.
      return links.length === 1 ? link : wrap(link);
    },
  });
  assert.equal(await store.whenAvailable(5_000), true, 'the store connects');
  await until('every connection is up', () => links.every((link) => link.isReady));
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

const unique = () => `ack-link-test:${Math.random().toString(36).slice(2)}`;

/** An acknowledged write's outcome: acknowledged (true), refused by the store (false), or another error. */
async function acknowledged(store: RedisStateStore): Promise<boolean> {
  try {
    return await store.setIfAbsent(unique(), 'v', TTL_MS, { acknowledged: true });
  } catch (err) {
    if (err instanceof StateStoreUnavailableError) return false;
    throw err;
  }
}

describe('an acknowledged write whose connection is replaced before its WAIT answers', () => {
  for (const at of ['after the write', 'before the WAIT'] as const) {
    it(`is refused when node-redis reconnects ${at}; the same write without a reconnect is acknowledged`, async () => {
      let reconnectAt: ReconnectAt = 'never';
      const reconnects: string[] = [];
      const opened = await openStore((link) => reconnecting(link, () => reconnectAt, reconnects));
      try {
        assert.equal(await acknowledged(opened.store), true, 'without a reconnect, the replica acknowledges');
        reconnectAt = at;
        // A WAIT on the new connection answers at once with the replica: it has no write of its own to wait for.
        assert.equal(await acknowledged(opened.store), false, 'the WAIT could not have counted the write');
        assert.deepEqual(reconnects, [at], 'the connection was dropped and connected again, at that step');
        reconnectAt = 'never';
        assert.equal(await acknowledged(opened.store), true, 'the next write is acknowledged again');
        assert.deepEqual(opened.availability, [], 'one connection dropping is no outage of the store');
      } finally {
        await opened.store.close();
      }
    });
  }
});

describe('acknowledging connections down', () => {
  it('one down: the store stays available and acknowledged writes go to the others; all down: refused', async () => {
    const opened = await openStore();
    const { store, acknowledging } = opened;
    const release = opened.holdLogins();
    try {
      const [first, ...others] = acknowledging;
      assert.ok(first !== undefined);
      await primary.cli('CLIENT', 'KILL', 'ID', (await connectionId(first)) ?? '');
      await until('the killed link is down', () => !first.isReady);
      for (let i = 0; i < 2 * ACKNOWLEDGED_WRITE_CONNECTIONS; i++) {
        assert.equal(await acknowledged(store), true, `acknowledged write ${i} with one connection down`);
      }
      assert.equal(first.isReady, false, 'the link was down all along');
      assert.equal(store.isAvailable(), true);
      assert.deepEqual(opened.availability, [], 'the store never counted as unavailable');

      for (const link of others) await primary.cli('CLIENT', 'KILL', 'ID', (await connectionId(link)) ?? '');
      await until('no acknowledging link is connected', () => acknowledging.every((link) => !link.isReady));
      await until('the store counts as unavailable', () => !store.isAvailable());
      assert.equal(await acknowledged(store), false, 'no connection for an acknowledged write: refused');

      release();
      assert.equal(await store.whenAvailable(10_000), true, 'available again once a link logs in');
      assert.equal(await acknowledged(store), true);
    } finally {
      release();
      await store.close();
    }
  });
});
