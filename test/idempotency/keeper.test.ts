import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { MemoryStateStore } from '../../src/state/memory-store.js';
import { describeKeeperContract, freshKey, gatewayAnswer, keeperOn, LONGEST_MS } from './keeper-contract.js';

describeKeeperContract('memory', () => Promise.resolve(new MemoryStateStore()));

describe('idempotency protocol, memory store specifics', () => {
  /** A key claimed (new) on a one-entry memory store, then its in_progress record evicted by another write. */
  async function claimThenEvict() {
    const store = new MemoryStateStore({ maxEntries: 1 });
    const { keeper } = keeperOn(store);
    const key = freshKey();
    const claim = await keeper.claim(key, 'fp', 'req-1');
    assert.equal(claim.kind, 'new');
    await store.setIfAbsent('someone-else', 'x', 60_000); // evicts the in_progress record
    return { store, keeper, key, claim };
  }

  it('a record evicted while its request was in flight is written back with the answer', async () => {
    const { store, keeper, key, claim } = await claimThenEvict();
    assert.equal(await store.get(`idempotency:${key.sha256}`), undefined);
    if (claim.kind === 'new') await keeper.complete(claim.ticket, gatewayAnswer);
    assert.equal((await keeper.claim(key, 'fp', 'req-2')).kind, 'replayed');
    await store.close();
  });

  it('a retry while the evicted record is in flight is in_progress (another body key_reused), never new', async () => {
    const { store, keeper, key, claim } = await claimThenEvict();
    assert.deepEqual(await keeper.claim(key, 'fp', 'req-2'), { kind: 'in_progress' });
    assert.deepEqual(await keeper.claim(key, 'other', 'req-3'), { kind: 'key_reused' });
    if (claim.kind === 'new') await keeper.release(claim.ticket);
    assert.equal((await keeper.claim(key, 'fp', 'req-4')).kind, 'new', 'released: nothing was sent');
    await store.close();
  });

  it("past its deadline, this replica's own claim is left to the store (abandoned there), not held here", async () => {
    const store = new MemoryStateStore();
    const { keeper, clock } = keeperOn(store);
    const key = freshKey();
    assert.equal((await keeper.claim(key, 'fp', 'req-1')).kind, 'new');
    clock.now += LONGEST_MS + 1;
    assert.equal((await keeper.claim(key, 'fp', 'req-2')).kind, 'abandoned');
    await store.close();
  });

  it('keys are stored under their SHA-256; no record holds the key itself', async () => {
    const store = new MemoryStateStore();
    const { keeper } = keeperOn(store);
    const key = freshKey();
    const claim = await keeper.claim(key, 'fp', 'req-1');
    assert.equal(claim.kind, 'new');
    const value = await store.get(`idempotency:${key.sha256}`);
    assert.ok(value);
    assert.equal(value.includes('key-'), false);
    await store.close();
  });

  it('an answer is kept for the TTL after it was recorded, then forgotten', async () => {
    let now = 1_000_000;
    const store = new MemoryStateStore({ now: () => now });
    const { keeper, clock } = keeperOn(store);
    clock.now = now;
    const key = freshKey();
    const claim = await keeper.claim(key, 'fp', 'req-1');
    if (claim.kind === 'new') await keeper.complete(claim.ticket, gatewayAnswer);
    now += 3_600_000 - 1;
    assert.equal((await keeper.claim(key, 'fp', 'req-2')).kind, 'replayed');
    now += 2;
    assert.equal((await keeper.claim(key, 'fp', 'req-3')).kind, 'new');
    await store.close();
  });
});
