import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { ReplayMemory } from '../../src/postback/replay-memory.js';
import { MemoryStateStore } from '../../src/state/memory-store.js';

describe('postback replay memory: the delivery claim', () => {
  const options = { nonceTtlMs: 95_000, deliveredTtlMs: 86_400_000, deliveryTimeoutMs: 10_000 };

  it('outlives the delivery and the store commands around it, so a redelivery meanwhile is not delivered too', async () => {
    let now = 0;
    const store = new MemoryStateStore({ now: () => now });
    const memory = new ReplayMemory(store, { ...options, storeCommandTimeoutMs: 3_000 });
    assert.deepEqual(await memory.claim('digest', 'first'), { kind: 'claimed' });
    // Past the delivery timeout and the fixed margin, but within the two store commands' timeouts.
    now = 10_000 + 5_000 + 5_000;
    assert.deepEqual(await memory.claim('digest', 'redelivery'), { kind: 'in_flight' });
    now = 10_000 + 2 * 3_000 + 5_000 + 1;
    assert.deepEqual(await memory.claim('digest', 'redelivery'), { kind: 'claimed' });
    await store.close();
  });

  it('is released by its own holder only, and a delivered payload is never claimed again', async () => {
    const store = new MemoryStateStore();
    const memory = new ReplayMemory(store, options);
    assert.deepEqual(await memory.claim('digest', 'first'), { kind: 'claimed' });
    await memory.release('digest', 'someone-else');
    assert.deepEqual(await memory.claim('digest', 'second'), { kind: 'in_flight' });
    await memory.release('digest', 'first');
    assert.deepEqual(await memory.claim('digest', 'second'), { kind: 'claimed' });
    await memory.delivered('digest', 'second');
    assert.deepEqual(await memory.claim('digest', 'third'), { kind: 'delivered' });
    await store.close();
  });

  it('is never evicted by a full memory store: nonces and delivered digests go first, oldest first', async () => {
    const store = new MemoryStateStore({ maxEntries: 3 });
    const memory = new ReplayMemory(store, options);
    assert.deepEqual(await memory.claim('delivering', 'first'), { kind: 'claimed' });
    for (const nonce of ['n1', 'n2', 'n3', 'n4']) assert.equal(await memory.recordNonce(nonce, 'd'), true);
    assert.deepEqual(await memory.claim('delivering', 'redelivery'), { kind: 'in_flight' });
    assert.equal(await memory.recordNonce('n4', 'd'), false, 'the newest nonce kept');
    assert.equal(await memory.recordNonce('n1', 'd'), true, 'the oldest nonce evicted: seen as new');
    await store.close();
  });
});
