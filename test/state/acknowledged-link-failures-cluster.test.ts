// Acknowledged writes in Cluster mode when node-redis replaces their connection before the WAIT answers. The held
// connection is the client of the node that serves the account's slot: a WAIT sent after that client reconnected runs
// on a connection that made no write, so the write is refused; the same write without a reconnect is acknowledged.
// Three primaries with a replica each, real redis-server processes on 127.0.0.1; the slot's owner drops the
// connection on CLIENT KILL, and node-redis connects it again by itself (no failover, no slot moves).
import { after, before } from 'node:test';
import { accountTag } from '../../src/state/redis-keys.js';
import { describeReplacedConnection } from '../support/reconnecting-link.js';
import type { TestRedis } from '../support/redis-server.js';
import { startCluster, type TestCluster } from '../support/redis-topologies.js';

const TAG = accountTag('https://gateway.test', 'merchant@example.test');

let cluster: TestCluster;
/** The primary serving the account's slot (every key of the account has its hash tag): where its writes go. */
let owner: TestRedis;

before(async () => {
  cluster = await startCluster(3, 1);
  const slot = Number((await cluster.nodes[0]!.cli('CLUSTER', 'KEYSLOT', `{${TAG}}`))[0]);
  owner = cluster.nodes[await cluster.ownerOf(slot)]!;
});
after(async () => {
  await cluster.close();
});

describeReplacedConnection(
  'Cluster',
  () => ({ mode: 'cluster', nodes: cluster.nodes.map((node) => ({ host: '127.0.0.1', port: node.port })) }),
  () => owner,
  TAG,
);
