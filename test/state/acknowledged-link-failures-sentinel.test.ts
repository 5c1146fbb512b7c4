// Acknowledged writes in Sentinel mode when node-redis replaces their connection before the WAIT answers. The held
// connection is the primary's client as the Sentinel client has it: a WAIT sent after that client reconnected runs
// on a connection that made no write, so the write is refused; the same write without a reconnect is acknowledged.
// A primary, one replica and three Sentinels, real processes on 127.0.0.1; the primary drops the connection on
// CLIENT KILL, and node-redis connects it again by itself (no failover: the Sentinels keep naming the same primary).
import assert from 'node:assert/strict';
import { after, before } from 'node:test';
import { accountTag } from '../../src/state/redis-keys.js';
import { describeReplacedConnection } from '../support/reconnecting-link.js';
import type { TestRedis } from '../support/redis-server.js';
import { startSentinelSet, type SentinelSet } from '../support/redis-topologies.js';

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

describeReplacedConnection(
  'Sentinel',
  () => set.topology,
  () => primary,
  accountTag('https://gateway.test', 'merchant@example.test'),
);
