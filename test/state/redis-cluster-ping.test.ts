// The store's PING on a Redis Cluster (the recovery probe, `check`) asks the node that serves the account's slot,
// not every primary: another shard's primary down is no reason to call the account's store down. Three primaries,
// real redis-server processes on 127.0.0.1, no replicas: the cluster keeps serving the other slots for its node
// timeout (15 s) after a primary dies.
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { accountTag } from '../../src/state/redis-keys.js';
import { RedisStateStore } from '../../src/state/redis-store.js';
import { startCluster, type TestCluster } from '../support/redis-topologies.js';

const TAG = accountTag('https://gateway.test', 'ping@example.test');

let cluster: TestCluster;
before(async () => {
  cluster = await startCluster(3);
});
after(async () => {
  await cluster.close();
});

describe("the store's PING on a Redis Cluster", () => {
  it("answers while another shard's primary is down, and fails while the account's own is", async () => {
    const nodes = cluster.nodes.map((node) => ({ host: '127.0.0.1', port: node.port }));
    const store = new RedisStateStore({
      topology: { mode: 'cluster', nodes },
      accountTag: TAG,
      commandTimeoutMs: 2_000,
    });
    try {
      assert.equal(await store.whenAvailable(10_000), true, 'the store connects to the cluster');
      const slot = Number((await cluster.nodes[0]!.cli('CLUSTER', 'KEYSLOT', store.storedKey('ping')))[0]);
      const owner = await cluster.ownerOf(slot);
      const other = cluster.nodes.find((_, index) => index !== owner)!;
      await store.ping();

      await other.crash();
      await store.ping();
      await store.ping();

      await cluster.nodes[owner]!.crash();
      await assert.rejects(store.ping(), "the account's node is down: the PING fails");
    } finally {
      await store.close();
    }
  });
});
