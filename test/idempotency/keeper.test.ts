import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { MemoryStateStore } from '../../src/state/memory-store.js';
import { StateStoreUnavailableError } from '../../src/state/state-store.js';
import { describeKeeperContract, freshKey, gatewayAnswer, keeperOn, LONGEST_MS } from './keeper-contract.js';

describeKeeperContract('memory', () => Promise.resolve(new MemoryStateStore()));

describe('idempotency protocol, memory store specifics', () => {
  /**
   * A key claimed (new), then its in_progress record lost while the request is in flight, as a Redis restart or
   * failover loses it (the memory store never evicts a claim: see below).
   */
  async function claimThenEvict() {
    const store = new MemoryStateStore();
    const { keeper } = keeperOn(store);
    const key = freshKey();
    const claim = await keeper.claim(key, 'fp', 'req-1');
    assert.equal(claim.kind, 'new');
    const storeKey = `idempotency:${key.sha256}`;
    assert.equal(await store.compareAndDelete(storeKey, (await store.get(storeKey))!), true);
    return { store, keeper, key, claim };
  }

  it('a full memory store evicts answers, never a claim in flight; claims alone filling it refuse the next', async () => {
    const store = new MemoryStateStore({ maxEntries: 3 });
    const { keeper } = keeperOn(store);
    const inFlight = freshKey();
    const claim = await keeper.claim(inFlight, 'fp', 'req-1');
    assert.equal(claim.kind, 'new');
    const answered = [];
    for (let i = 0; i < 5; i++) {
      const key = freshKey();
      const other = await keeper.claim(key, 'fp', `req-other-${i}`);
      if (other.kind === 'new') await keeper.complete(other.ticket, gatewayAnswer);
      answered.push(key);
    }
    const record = await store.get(`idempotency:${inFlight.sha256}`);
    assert.match(record ?? '', /"state":"in_progress"/, 'the oldest entry, but a claim: kept');
    assert.equal(await store.get(`idempotency:${answered[0]!.sha256}`), undefined, 'the oldest answer went');
    assert.equal((await keeper.claim(answered[4]!, 'fp', 'req-again')).kind, 'replayed');
    // Two more claims in flight: with the first, claims fill the three entries; a fourth is refused, nothing sent.
    for (const id of ['req-2', 'req-3']) assert.equal((await keeper.claim(freshKey(), 'fp', id)).kind, 'new');
    await assert.rejects(keeper.claim(freshKey(), 'fp', 'req-4'), StateStoreUnavailableError);
    if (claim.kind === 'new') await keeper.complete(claim.ticket, gatewayAnswer);
    assert.equal((await keeper.claim(inFlight, 'fp', 'req-1-again')).kind, 'replayed');
    assert.equal((await keeper.claim(freshKey(), 'fp', 'req-5')).kind, 'new', 'an answer evicted to make room');
    await store.close();
  });

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
