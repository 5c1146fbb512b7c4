// Acknowledged writes in Cluster mode when node-redis replaces their connection before the WAIT answers. The held
// connection is the client of the node that serves the account's slot: a WAIT sent after that client reconnected runs
// on a connection that made no write, so the write is refused; the same write without a reconnect is acknowledged.
// Three primaries with a replica each, real redis-server processes on 127.0.0.1; the slot's owner drops the
// connection on CLIENT KILL, and node-redis connects it again by itself (no failover, no slot moves).
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { ACKNOWLEDGED_WRITE_CONNECTIONS } from '../../src/state/link-pool.js';
import type { RedisLink } from '../../src/state/redis-client.js';
import { accountTag } from '../../src/state/redis-keys.js';
import { RedisStateStore } from '../../src/state/redis-store.js';
import { acknowledgingWrapped, assertReplacedConnectionRefused, Reconnects } from '../support/reconnecting-link.js';
import type { TestRedis } from '../support/redis-server.js';
import { startCluster, type TestCluster } from '../support/redis-topologies.js';
import { waitFor } from '../support/wait-for.js';

const COMMAND_TIMEOUT_MS = 2_000;
const TAG = accountTag('https://gateway.test', 'merchant@example.test');

let cluster: TestCluster;
/** The primary serving the account's slot (every key of the account has its hash tag): where its writes go. */
let owner: TestRedis;

before(async () => {
  cluster = await startCluster(3, 1);
  const slot = Number((await cluster.nodes[0]!.cli('CLUSTER', 'KEYSLOT', `{${TAG}}`))[0]);
  owner = cluster.nodes[await cluster.ownerOf(slot)]!;
  // Every primary's replica in sync, so that the owner's can acknowledge.
  await waitFor(
    "every primary's replica in sync",
    async () => {
      const roles = await Promise.all(cluster.nodes.map((node) => node.cli('INFO', 'replication')));
      const primaries = roles.filter((lines) => lines.some((line) => line.trim() === 'role:master'));
      const synced = primaries.filter((lines) => lines.some((line) => /^slave0:.*state=online/.test(line)));
      return primaries.length === 3 && synced.length === 3;
    },
    20_000,
  );
});
after(async () => {
  await cluster.close();
});

async function openStore(
  wrap: (link: RedisLink) => RedisLink,
): Promise<{ store: RedisStateStore; availability: boolean[] }> {
  const links: RedisLink[] = [];
  const store = new RedisStateStore({
    topology: { mode: 'cluster', nodes: cluster.nodes.map((node) => ({ host: '127.0.0.1', port: node.port })) },
    accountTag: TAG,
    commandTimeoutMs: COMMAND_TIMEOUT_MS,
    minReplicasAcked: 1,
    createLink: acknowledgingWrapped(wrap, links),
  });
  assert.equal(await store.whenAvailable(15_000), true, 'the store connects to the cluster');
  await waitFor('every connection is up', () => links.every((link) => link.isReady), 15_000);
  assert.equal(links.length, 1 + ACKNOWLEDGED_WRITE_CONNECTIONS);
  const availability: boolean[] = [];
  store.onAvailabilityChange((available) => availability.push(available));
  return { store, availability };
}

describe('Cluster mode: an acknowledged write whose connection is replaced before its WAIT answers', () => {
  for (const at of ['after the write', 'before the WAIT'] as const) {
    it(`is refused when node-redis reconnects ${at}; the same write without a reconnect is acknowledged`, async () => {
      const reconnects = new Reconnects(owner);
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
