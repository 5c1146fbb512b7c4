// A store closed while it is still connecting (a sidecar stopped right after its start, a tool's short run) leaves
// no connection to Redis behind. node-redis's own destroy() does not always: a client destroyed while its socket is
// being opened connects anyway, and a cluster's slot discovery under way connects to every node after it; those
// clients then reconnect for as long as the process lives, which kept a test process alive long after its tests.
// Real redis-server and redis-sentinel processes, each topology; stores closed at several moments of connecting.
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { accountTag } from '../../src/state/redis-keys.js';
import type { RedisTopology } from '../../src/config/state-settings.js';
import { RedisStateStore } from '../../src/state/redis-store.js';
import { startRedis, type TestRedis } from '../support/redis-server.js';
import { startCluster, startSentinelSet, type SentinelSet, type TestCluster } from '../support/redis-topologies.js';

/** Milliseconds from a store's creation to its close: before the socket opens, while it opens, after. */
const CLOSED_AFTER_MS = [0, 0, 1, 2, 3, 5, 10, 20, 50];

/**
 * Connections of ordinary clients without a name on the data nodes: this process's stores' (Sentinels name their
 * connections, replicas are flagged S, and the CLIENT LIST that asks is left out).
 */
async function storeConnections(nodes: readonly TestRedis[]): Promise<number> {
  let count = 0;
  for (const node of nodes) {
    const clients = await node.cli('CLIENT', 'LIST');
    count += clients.filter(
      (c) => /\bname= /.test(c) && /\bflags=N\b/.test(c) && !c.includes('cmd=client|list'),
    ).length;
  }
  return count;
}

/** Opens and closes a store at each moment of CLOSED_AFTER_MS; then none of its connections is left. */
async function closedWhileConnecting(topology: RedisTopology, nodes: readonly TestRedis[]): Promise<void> {
  const before = await storeConnections(nodes);
  for (const ms of CLOSED_AFTER_MS) {
    const store = new RedisStateStore({
      topology,
      accountTag: accountTag('https://gateway.test', 'merchant@example.test'),
      commandTimeoutMs: 1_000,
      minReplicasAcked: 1,
    });
    await sleep(ms);
    await store.close();
  }
  // Late enough for a connection opened after the close, and a cluster's discovery under way, to have been made.
  await sleep(1_000);
  assert.equal(await storeConnections(nodes), before, 'connections left by closed stores');
}

describe('a store closed while it connects leaves no connection behind', () => {
  let redis: TestRedis;
  let cluster: TestCluster;
  let set: SentinelSet;
  before(async () => {
    [redis, cluster, set] = await Promise.all([startRedis(), startCluster(3), startSentinelSet()]);
  });
  after(async () => {
    await Promise.all([redis.close(), cluster.close(), set.close()]);
  });

  it('standalone', async () => {
    await closedWhileConnecting({ mode: 'standalone', url: redis.url }, [redis]);
  });

  it('Redis Cluster', async () => {
    const nodes = cluster.nodes.map((node) => ({ host: '127.0.0.1', port: node.port }));
    await closedWhileConnecting({ mode: 'cluster', nodes }, cluster.nodes);
  });

  it('Sentinel', async () => {
    await closedWhileConnecting(set.topology, set.nodes);
  });
});
