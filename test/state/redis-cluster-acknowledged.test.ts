// Acknowledged writes on a Redis Cluster whose primaries have a replica each (real redis-server processes): the write
// and its WAIT go on the connection to the account's node. When the account's slot is migrating (ASK) or has moved
// (MOVED), the write goes to the node Redis names, and its WAIT with it, so the replica that acknowledges is the one
// of the node that holds the write.
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { accountTag, DEFAULT_REDIS_KEY_PREFIX } from '../../src/state/redis-keys.js';
import { RedisStateStore } from '../../src/state/redis-store.js';
import { startCluster, type TestCluster } from '../support/redis-topologies.js';

const TAG = accountTag('https://gateway.test', 'acknowledged@example.test');
const TTL_MS = 60_000;

let cluster: TestCluster;
let store: RedisStateStore;
let slot: number;

before(async () => {
  cluster = await startCluster(3, 1);
  const nodes = cluster.nodes.map((node) => ({ host: '127.0.0.1', port: node.port }));
  store = new RedisStateStore({
    topology: { mode: 'cluster', nodes },
    accountTag: TAG,
    commandTimeoutMs: 2_000,
    minReplicasAcked: 1,
  });
  assert.equal(await store.whenAvailable(10_000), true, 'the store connects to the cluster');
  slot = Number((await cluster.nodes[0]!.cli('CLUSTER', 'KEYSLOT', store.storedKey('x')))[0]);
});
after(async () => {
  await store.close();
  await cluster.close();
});

const unique = () => `ack-cluster:${Math.random().toString(36).slice(2)}`;

/** Another primary than the one serving the account's slot. */
async function otherPrimary(owner: number): Promise<number> {
  for (const [index, node] of cluster.nodes.entries()) {
    if (index !== owner && (await node.cli('ROLE'))[0] === 'master') return index;
  }
  throw new Error('no other primary');
}

/** The keys of the account's slot that node `index` holds. */
async function keysOn(index: number): Promise<string[]> {
  return (await cluster.nodes[index]!.cli('CLUSTER', 'GETKEYSINSLOT', String(slot), '1000')).filter(Boolean);
}

describe('acknowledged writes on a Redis Cluster', () => {
  it('on the slot owner, while it migrates (ASK), and once it has moved (MOVED): acknowledged where written', async () => {
    assert.ok(slot >= 0 && store.storedKey('x').startsWith(`${DEFAULT_REDIS_KEY_PREFIX}{${TAG}}`));
    const owner = await cluster.ownerOf(slot);
    const target = await otherPrimary(owner);
    const written = async () => {
      const key = unique();
      assert.equal(await store.setIfAbsent(key, 'v', TTL_MS, { acknowledged: true }), true, 'acknowledged');
      return store.storedKey(key);
    };

    const atOwner = await written();
    assert.ok((await keysOn(owner)).includes(atOwner), 'written on the owner');

    // Migrating: the owner answers ASK for a key it does not hold; the importing node takes it after ASKING.
    const [ownerId, targetId] = await Promise.all(
      [owner, target].map(async (index) => (await cluster.nodes[index]!.cli('CLUSTER', 'MYID'))[0] ?? ''),
    );
    await cluster.nodes[target]!.cli('CLUSTER', 'SETSLOT', String(slot), 'IMPORTING', ownerId!);
    await cluster.nodes[owner]!.cli('CLUSTER', 'SETSLOT', String(slot), 'MIGRATING', targetId!);
    const whileMigrating = await written();
    assert.ok((await keysOn(target)).includes(whileMigrating), 'written on the importing node');
    assert.ok(!(await keysOn(owner)).includes(whileMigrating));

    // Moved: the store's connections still send to the old owner, which answers MOVED.
    await cluster.moveSlot(slot, target);
    for (let i = 0; i < 8; i++) {
      const key = await written();
      const primaries = [owner, target, await otherPrimary(target)].filter(
        (index, at, all) => all.indexOf(index) === at,
      );
      const holders = [];
      for (const index of primaries) if ((await keysOn(index)).includes(key)) holders.push(index);
      assert.deepEqual(holders, [target], `write ${i} on the new owner only (was on ${owner})`);
    }
  });
});
