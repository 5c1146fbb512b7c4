/**
 * An acknowledged write's connection dropped and connected again at a chosen step, whatever the topology:
 *
 *   const reconnects = new Reconnects(primary);  // the node the account's writes go to
 *   const store = new RedisStateStore({ ..., createLink: acknowledgingWrapped(reconnects.wrap, links) });
 *   reconnects.at = 'after the write';      // the next acknowledged write's connection is dropped after its SET
 *   await acknowledgedWrite(store)           // false: refused (StateStoreUnavailableError)
 *   reconnects.done                          // ['after the write']: it was dropped and connected again, there
 *   await assertReplacedConnectionRefused(store, reconnects, 'before the WAIT')   // the whole case, asserted
 *
 * The connection is found by CLIENT INFO on the link (its id, and the node it is on) and dropped by CLIENT KILL ID
 * on that node, as the default user (the link's own user needs only `+client|info`). node-redis connects again by
 * itself; the step resolves once it has, so the command that follows goes on the new connection, deterministically.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { ACKNOWLEDGED_WRITE_CONNECTIONS } from '../../src/state/link-pool.js';
import {
  createRedisLink,
  type HeldConnection,
  type RedisConnectionOptions,
  type RedisLink,
} from '../../src/state/redis-client.js';
import { RedisStateStore, type RedisStoreOptions } from '../../src/state/redis-store.js';
import { StateStoreUnavailableError } from '../../src/state/state-store.js';
import { waitFor } from './wait-for.js';

/** How long node-redis may take to connect again (its backoff is capped at 1 s): a loaded machine's margin. */
const RECONNECT_WITHIN_MS = 15_000;
/** One CLIENT INFO: a Sentinel link retries a command while its primary's client is down, so it is bounded here. */
const CLIENT_INFO_WITHIN_MS = 2_000;
/**
 * A cluster link sends a keyless command such as CLIENT INFO to a random node, whatever key it is given: it is sent
 * again until the node asked for answers (one node of six: 64 tries all miss it once in 10^5 calls).
 */
const TRIES_FOR_THE_NODE = 64;

/** The Redis node whose connections are dropped: the primary, or in a cluster the owner of the account's slot. */
export interface KillingNode {
  readonly port: number;
  cli(...args: string[]): Promise<string[]>;
}

/** One CLIENT INFO on `link`, bounded: the connection's id and the server port it is on, or undefined. */
async function clientInfo(link: RedisLink, key: string): Promise<{ id: string; port: number } | undefined> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<undefined>(
    (resolve) => (timer = setTimeout(() => resolve(undefined), CLIENT_INFO_WITHIN_MS)),
  );
  try {
    const info = await Promise.race([link.command(key, ['CLIENT', 'INFO']), late]);
    if (typeof info !== 'string') return undefined;
    const id = /(?:^| )id=(\d+)/.exec(info)?.[1];
    const port = /(?:^| )laddr=[^ ]*:(\d+)/.exec(info)?.[1];
    return id === undefined || port === undefined ? undefined : { id, port: Number(port) };
  } catch {
    return undefined;
  } finally {
    clearTimeout(timer);
  }
}

/**
 * The server's id of the connection `link` has to `node` now (undefined while it has none): in a cluster, the one
 * `key`'s commands go on when `node` serves its slot.
 */
export async function connectionId(link: RedisLink, key: string, node: KillingNode): Promise<string | undefined> {
  for (let i = 0; i < TRIES_FOR_THE_NODE; i++) {
    const info = await clientInfo(link, key);
    if (info?.port === node.port) return info.id;
  }
  return undefined;
}

/** Drops the connection `link` has to `node`, and resolves once node-redis is on a new one. */
export async function reconnect(link: RedisLink, key: string, node: KillingNode): Promise<void> {
  const before = await connectionId(link, key, node);
  assert.ok(before !== undefined, 'the link is connected');
  await node.cli('CLIENT', 'KILL', 'ID', before);
  await waitFor(
    'the link is on a new connection',
    async () => {
      const now = await connectionId(link, key, node);
      return now !== undefined && now !== before;
    },
    RECONNECT_WITHIN_MS,
  );
}

/**
 * When, in an acknowledged write, the connection is dropped and connected again: not at all, or at that step. The
 * step before the WAIT holds the WAIT back until the new connection is up: it then goes there, as a WAIT that is not
 * pipelined with its write (a script's first run on a connection) would after a reconnect.
 */
export type ReconnectAt = 'never' | 'after the write' | 'before the WAIT';

/** Links whose held connections are dropped and connected again at the step `at` names, when a test sets it. */
export class Reconnects {
  at: ReconnectAt = 'never';
  /** The steps at which a held connection was dropped and connected again, in order. */
  readonly done: ReconnectAt[] = [];

  constructor(private readonly node: KillingNode) {}

  /** `link`, its held connections dropped and reconnected at `at`. */
  readonly wrap = (link: RedisLink): RedisLink => {
    const hold = async (key: string): Promise<HeldConnection> => {
      const held = await link.hold(key);
      // One drop per held connection: every command of it at or after the step waits for the new connection.
      let reconnected: Promise<void> | undefined;
      const step = (when: ReconnectAt): Promise<void> => {
        if (reconnected === undefined && this.at === when)
          reconnected = reconnect(link, key, this.node).then(() => void this.done.push(when));
        return reconnected ?? Promise.resolve();
      };
      return heldWith(held, {
        setIfAbsent: async (...args) => {
          const written = await held.setIfAbsent(...args);
          await step('after the write');
          return written;
        },
        wait: async (...args) => {
          await step('before the WAIT');
          return held.wait(...args);
        },
      });
    };
    return holdingWith(link, hold);
  };
}

/** `held`, some of its commands replaced by `own`; the rest, and its state, are `held`'s. */
export function heldWith(
  held: HeldConnection,
  own: Partial<Pick<HeldConnection, 'setIfAbsent' | 'evalSha' | 'eval' | 'wait'>>,
): HeldConnection {
  return {
    get replaced() {
      return held.replaced;
    },
    get sentSinceWait() {
      return held.sentSinceWait;
    },
    hasScript: (sha1) => held.hasScript(sha1),
    setIfAbsent: own.setIfAbsent ?? ((...args) => held.setIfAbsent(...args)),
    evalSha: own.evalSha ?? ((...args) => held.evalSha(...args)),
    eval: own.eval ?? ((...args) => held.eval(...args)),
    wait: own.wait ?? ((...args) => held.wait(...args)),
  };
}

/** `link`, its held connections made by `hold` instead. */
export function holdingWith(link: RedisLink, hold: (key: string) => Promise<HeldConnection>): RedisLink {
  return new Proxy(link, {
    get: (target, property, receiver): unknown =>
      property === 'hold' ? hold : (Reflect.get(target, property, receiver) as unknown),
  });
}

/**
 * The store's `createLink`, with its acknowledging links wrapped: the store makes its commands link first, then
 * one per acknowledging connection. Every link made is pushed on `links`, as made (unwrapped).
 */
export function acknowledgingWrapped(
  wrap: (link: RedisLink) => RedisLink,
  links: RedisLink[],
): (options: RedisConnectionOptions) => RedisLink {
  return (options) => {
    const link = createRedisLink(options);
    links.push(link);
    return links.length === 1 ? link : wrap(link);
  };
}

const unique = () => `ack-link-test:${Math.random().toString(36).slice(2)}`;

/** An acknowledged write's outcome: acknowledged (true), refused by the store (false), or another error. */
export async function acknowledgedWrite(store: RedisStateStore, ttlMs = 60_000): Promise<boolean> {
  try {
    return await store.setIfAbsent(unique(), 'v', ttlMs, { acknowledged: true });
  } catch (err) {
    if (err instanceof StateStoreUnavailableError) return false;
    throw err;
  }
}

/**
 * Acknowledged writes on `store`, whose acknowledging links `reconnects` wraps: one without a reconnect
 * (acknowledged), one whose connection node-redis replaces at `at` (refused: a WAIT on the new connection answers at
 * once with every replica, having no write of its own to wait for, so it could not have counted the write), and one
 * without again (acknowledged: the refusal was that write's, not the store's).
 */
export async function assertReplacedConnectionRefused(
  store: RedisStateStore,
  reconnects: Reconnects,
  at: Exclude<ReconnectAt, 'never'>,
): Promise<void> {
  assert.equal(await acknowledgedWrite(store), true, 'without a reconnect, the replica acknowledges');
  reconnects.at = at;
  const outcome = await acknowledgedWrite(store);
  reconnects.at = 'never';
  assert.deepEqual(reconnects.done, [at], 'the connection was dropped and connected again, at that step');
  assert.equal(outcome, false, 'the WAIT could not have counted the write');
  assert.equal(await acknowledgedWrite(store), true, 'the next write is acknowledged again');
}

/**
 * The two cases on one topology (its test file starts the servers): a store with acknowledged writes on
 * `topology()` whose held connection on `node()` is dropped after the write, or before the WAIT; the write is refused,
 * the same write without a drop is acknowledged, and one connection dropping is no outage of the store.
 */
export function describeReplacedConnection(
  mode: string,
  topology: () => RedisStoreOptions['topology'],
  node: () => KillingNode,
  accountTag: string,
): void {
  describe(`${mode} mode: an acknowledged write whose connection is replaced before its WAIT answers`, () => {
    for (const at of ['after the write', 'before the WAIT'] as const) {
      it(`is refused when node-redis reconnects ${at}; the same write without a reconnect is acknowledged`, async () => {
        const reconnects = new Reconnects(node());
        const links: RedisLink[] = [];
        const store = new RedisStateStore({
          topology: topology(),
          accountTag,
          commandTimeoutMs: 2_000,
          minReplicasAcked: 1,
          createLink: acknowledgingWrapped(reconnects.wrap, links),
        });
        try {
          assert.equal(await store.whenAvailable(15_000), true, 'the store connects');
          await waitFor('every connection is up', () => links.every((link) => link.isReady), 15_000);
          assert.equal(links.length, 1 + ACKNOWLEDGED_WRITE_CONNECTIONS);
          const availability: boolean[] = [];
          store.onAvailabilityChange((available) => availability.push(available));
          await assertReplacedConnectionRefused(store, reconnects, at);
          assert.deepEqual(availability, [], 'one connection dropping is no outage of the store');
        } finally {
          await store.close();
        }
      });
    }
  });
}
