// Acknowledged writes in Sentinel mode when node-redis replaces their connection before the WAIT answers. The held
// connection is the primary's client as the Sentinel client has it: a WAIT sent after that client reconnected runs
// on a connection that made no write, so the write is refused; the same write without a reconnect is acknowledged.
// A primary, one replica and three Sentinels, real processes on 127.0.0.1; the primary drops the connection on
// CLIENT KILL, and node-redis connects it again by itself (no failover: the Sentinels keep naming the same primary).
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { ACKNOWLEDGED_WRITE_CONNECTIONS } from '../../src/state/link-pool.js';
import type { RedisLink } from '../../src/state/redis-client.js';
import { accountTag } from '../../src/state/redis-keys.js';
import { RedisStateStore } from '../../src/state/redis-store.js';
import { acknowledgingWrapped, assertReplacedConnectionRefused, Reconnects } from '../support/reconnecting-link.js';
import type { TestRedis } from '../support/redis-server.js';
import { SENTINEL_MASTER, startSentinelSet, type SentinelSet } from '../support/redis-topologies.js';
import { waitFor } from '../support/wait-for.js';

const COMMAND_TIMEOUT_MS = 2_000;

let set: SentinelSet;
/** The node the Sentinels name primary: the one whose connections the store's writes go on. */
let primary: TestRedis;

before(async () => {
  set = await startSentinelSet();
  const named = await set.settled(30_000);
  const node = set.nodes.find((candidate) => named === `127.0.0.1:${candidate.port}`);
  assert.ok(node !== undefined, `the Sentinels name a node of the set (${named})`);
  primary = node;
});
after(async () => {
  await set.close();
});

async function openStore(
  wrap: (link: RedisLink) => RedisLink,
): Promise<{ store: RedisStateStore; availability: boolean[] }> {
  const links: RedisLink[] = [];
  const store = new RedisStateStore({
    topology: {
      mode: 'sentinel',
      sentinels: set.sentinelPorts.map((port) => ({ host: '127.0.0.1', port })),
      master: SENTINEL_MASTER,
      sentinelUsername: undefined,
      sentinelPassword: undefined,
      sentinelPasswordFile: undefined,
    },
    accountTag: accountTag('https://gateway.test', 'merchant@example.test'),
    commandTimeoutMs: COMMAND_TIMEOUT_MS,
    minReplicasAcked: 1,
    createLink: acknowledgingWrapped(wrap, links),
  });
  assert.equal(await store.whenAvailable(15_000), true, 'the store connects through the Sentinels');
  await waitFor('every connection is up', () => links.every((link) => link.isReady), 15_000);
  assert.equal(links.length, 1 + ACKNOWLEDGED_WRITE_CONNECTIONS);
  const availability: boolean[] = [];
  store.onAvailabilityChange((available) => availability.push(available));
  return { store, availability };
}

describe('Sentinel mode: an acknowledged write whose connection is replaced before its WAIT answers', () => {
  for (const at of ['after the write', 'before the WAIT'] as const) {
    it(`is refused when node-redis reconnects ${at}; the same write without a reconnect is acknowledged`, async () => {
      const reconnects = new Reconnects(primary);
      const { store, availability } = await openStore(reconnects.wrap);
      try {
        await assertReplacedConnectionRefused(store, reconnects, at);
        assert.deepEqual(availability, [], 'one connection dropping is no outage of the store');
      } finally {
        await store.close();
      }
    });
  }
});
