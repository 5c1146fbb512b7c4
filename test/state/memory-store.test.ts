import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { MemoryStateStore } from '../../src/state/memory-store.js';
import { describeStateStoreContract } from './store-contract.js';

describeStateStoreContract('memory', () => Promise.resolve(new MemoryStateStore()));

describe('MemoryStateStore bounds', () => {
  it('evicts the oldest entries first past maxEntries and reports each eviction', async () => {
    const evicted: string[] = [];
    const store = new MemoryStateStore({ maxEntries: 3, onEvict: (key) => evicted.push(key) });
    for (const k of ['a', 'b', 'c', 'd', 'e']) await store.setIfAbsent(k, k, 60_000);
    assert.deepEqual(evicted, ['a', 'b']);
    assert.equal(store.size, 3);
    assert.equal(await store.get('a'), undefined);
    assert.equal(await store.get('e'), 'e');
    await store.close();
  });

  it('drops expired entries before evicting live ones', async () => {
    let now = 1_000;
    const evicted: string[] = [];
    const store = new MemoryStateStore({ maxEntries: 2, now: () => now, onEvict: (key) => evicted.push(key) });
    await store.setIfAbsent('short', 'v', 10);
    await store.setIfAbsent('long', 'v', 60_000);
    now += 100;
    await store.setIfAbsent('new', 'v', 60_000);
    assert.deepEqual(evicted, []);
    assert.equal(await store.get('long'), 'v');
    await store.close();
  });
});
