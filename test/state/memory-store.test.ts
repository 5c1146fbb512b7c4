import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { approximateBytes, ENTRY_OVERHEAD_BYTES, MemoryStateStore } from '../../src/state/memory-store.js';
import { StateStoreUnavailableError } from '../../src/state/state-store.js';
import { describeStateStoreContract } from './store-contract.js';

describeStateStoreContract('memory', () => Promise.resolve(new MemoryStateStore()));

const PINNED = { pinned: true } as const;
/** A value whose entry under a key of `keyLength` characters costs exactly `bytes` of the budget. */
const valueOf = (bytes: number, keyLength = 1) => 'v'.repeat(bytes - ENTRY_OVERHEAD_BYTES - keyLength);

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

  it('counts a string of one-byte characters once and a two-byte one twice, plus the overhead per entry', () => {
    assert.equal(approximateBytes('k', 'ascii é'), 1 + 7 + ENTRY_OVERHEAD_BYTES);
    assert.equal(approximateBytes('k', 'zł'), 1 + 2 * 2 + ENTRY_OVERHEAD_BYTES);
  });

  it('evicts the oldest entries first past maxBytes, and reports its usage within the budget', async () => {
    const evicted: string[] = [];
    const store = new MemoryStateStore({ maxBytes: 3_000, onEvict: (key) => evicted.push(key) });
    for (const k of ['a', 'b', 'c', 'd', 'e']) await store.setIfAbsent(k, valueOf(1_000), 60_000);
    assert.deepEqual(evicted, ['a', 'b']);
    assert.deepEqual(store.usage(), { bytes: 3_000, maxBytes: 3_000, entries: 3, maxEntries: 200_000 });
    // A larger answer under a key already held takes the room of the oldest other entry.
    await store.compareAndSet('e', valueOf(1_000), valueOf(2_000), 60_000);
    assert.deepEqual(evicted, ['a', 'b', 'c']);
    assert.equal(store.usage().bytes, 3_000);
    assert.equal(await store.compareAndDelete('e', valueOf(2_000)), true);
    assert.deepEqual(store.usage(), { bytes: 1_000, maxBytes: 3_000, entries: 1, maxEntries: 200_000 });
    await store.close();
  });

  it('never evicts a pinned entry: the oldest settled ones go instead, however old the pinned one', async () => {
    const evicted: string[] = [];
    const store = new MemoryStateStore({ maxBytes: 3_000, onEvict: (key) => evicted.push(key) });
    await store.setIfAbsent('claim', valueOf(1_000, 5), 60_000, PINNED);
    for (const k of ['a', 'b', 'c', 'd']) await store.setIfAbsent(k, valueOf(1_000), 60_000);
    assert.deepEqual(evicted, ['a', 'b']);
    assert.equal(await store.get('claim'), valueOf(1_000, 5));
    // Settled (rewritten without the flag): evictable like any other, and the oldest-written goes first.
    await store.compareAndSet('claim', valueOf(1_000, 5), valueOf(1_000, 5), 60_000);
    await store.setIfAbsent('e', valueOf(1_000), 60_000);
    assert.deepEqual(evicted, ['a', 'b', 'c']);
    await store.setIfAbsent('f', valueOf(1_000), 60_000);
    await store.setIfAbsent('g', valueOf(1_000), 60_000);
    assert.deepEqual(evicted, ['a', 'b', 'c', 'd', 'claim']);
    await store.close();
  });

  it('refuses a new pinned entry that would not fit with every settled entry gone; the store stays as it was', async () => {
    const store = new MemoryStateStore({ maxBytes: 3_000 });
    await store.setIfAbsent('claim-1', valueOf(1_000, 7), 60_000, PINNED);
    await store.setIfAbsent('answer', valueOf(1_000, 6), 60_000);
    await store.setIfAbsent('claim-2', valueOf(1_500, 7), 60_000, PINNED);
    assert.equal(await store.get('answer'), undefined, 'a settled entry evicted to make room for a claim');
    await assert.rejects(store.setIfAbsent('claim-3', valueOf(600, 7), 60_000, PINNED), StateStoreUnavailableError);
    assert.equal(await store.get('claim-3'), undefined);
    assert.deepEqual(store.usage(), { bytes: 2_500, maxBytes: 3_000, entries: 2, maxEntries: 200_000 });
    // One that fits still does; so does a claim once another is settled (its answer then evicted for room).
    await store.setIfAbsent('claim-3', valueOf(500, 7), 60_000, PINNED);
    await store.compareAndSet('claim-1', valueOf(1_000, 7), valueOf(900, 7), 60_000);
    await store.setIfAbsent('claim-4', valueOf(900, 7), 60_000, PINNED);
    assert.equal(await store.get('claim-1'), undefined);
    assert.equal(await store.get('claim-4'), valueOf(900, 7));
    await store.close();
  });

  it('counts pinned entries against maxEntries too, and frees a claim whose TTL ran out', async () => {
    let now = 1_000;
    const store = new MemoryStateStore({ maxEntries: 2, now: () => now });
    await store.setIfAbsent('claim-1', 'x', 60_000, PINNED);
    await store.setIfAbsent('claim-2', 'x', 1_000, PINNED);
    await assert.rejects(store.setIfAbsent('claim-3', 'x', 60_000, PINNED), StateStoreUnavailableError);
    now += 2_000;
    assert.equal(await store.setIfAbsent('claim-3', 'x', 60_000, PINNED), true);
    await store.close();
  });

  it('stores a settled entry even when claims fill the budget, over it by that entry until the next write', async () => {
    const evicted: string[] = [];
    const store = new MemoryStateStore({ maxBytes: 3_000, onEvict: (key) => evicted.push(key) });
    await store.setIfAbsent('claim-1', valueOf(1_500, 7), 60_000, PINNED);
    await store.setIfAbsent('claim-2', valueOf(1_500, 7), 60_000, PINNED);
    assert.equal(await store.setIfAbsent('answer-1', valueOf(1_000, 8), 60_000), true);
    assert.equal(store.usage().bytes, 4_000);
    await store.setIfAbsent('answer-2', valueOf(1_000, 8), 60_000);
    assert.deepEqual(evicted, ['answer-1']);
    assert.equal(store.usage().bytes, 4_000);
    await store.close();
  });
});
