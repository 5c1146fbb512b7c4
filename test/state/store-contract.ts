import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import type { StateStore } from '../../src/state/state-store.js';
import { waitFor } from '../support/wait-for.js';

/** Every StateStore implementation passes this one suite (memory-store.test.ts, redis-store.test.ts). */
export function describeStateStoreContract(name: string, open: () => Promise<StateStore>): void {
  describe(`StateStore contract: ${name}`, () => {
    let store: StateStore;
    let n = 0;
    // Each test gets keys of its own: the Redis store's database is shared by every test in the file.
    const key = (label: string) => `contract:${label}:${process.pid}:${++n}:${Date.now()}`;

    before(async () => {
      store = await open();
    });
    after(async () => {
      await store.close();
    });

    it('answers undefined for a key never written', async () => {
      assert.equal(await store.get(key('missing')), undefined);
      assert.deepEqual(await store.read(key('missing')), { found: 'none' });
    });

    it('read tells a value from nothing, as get does', async () => {
      const k = key('read');
      await store.setIfAbsent(k, 'value', 10_000);
      assert.deepEqual(await store.read(k), { found: 'value', value: 'value' });
    });

    it('setIfAbsent stores once and refuses a second writer', async () => {
      const k = key('nx');
      assert.equal(await store.setIfAbsent(k, 'first', 10_000), true);
      assert.equal(await store.setIfAbsent(k, 'second', 10_000), false);
      assert.equal(await store.get(k), 'first');
    });

    it('of many concurrent setIfAbsent calls on one key exactly one wins', async () => {
      const k = key('race');
      const wins = await Promise.all(Array.from({ length: 50 }, (_, i) => store.setIfAbsent(k, `v${i}`, 10_000)));
      assert.equal(wins.filter(Boolean).length, 1);
      assert.equal(await store.get(k), `v${wins.indexOf(true)}`);
    });

    it('compareAndSet replaces only the expected value', async () => {
      const k = key('cas');
      assert.equal(await store.compareAndSet(k, 'nothing-yet', 'x', 10_000), false);
      assert.equal(await store.get(k), undefined);
      assert.equal(await store.compareAndSet(k, undefined, 'one', 10_000), true);
      assert.equal(await store.compareAndSet(k, undefined, 'again', 10_000), false);
      assert.equal(await store.compareAndSet(k, 'stale', 'two', 10_000), false);
      assert.equal(await store.compareAndSet(k, 'one', 'two', 10_000), true);
      assert.equal(await store.get(k), 'two');
    });

    it('compareAndDelete deletes only for the owner', async () => {
      const k = key('cad');
      await store.setIfAbsent(k, 'owner-a', 10_000);
      assert.equal(await store.compareAndDelete(k, 'owner-b'), false);
      assert.equal(await store.get(k), 'owner-a');
      assert.equal(await store.compareAndDelete(k, 'owner-a'), true);
      assert.equal(await store.get(k), undefined);
      assert.equal(await store.setIfAbsent(k, 'owner-b', 10_000), true);
    });

    it('forgets a key once its TTL has passed, and compareAndSet renews the TTL', async () => {
      const short = key('ttl');
      // 600 ms: room for a loaded host between the set and the renewal (a sleep is only ever longer than asked).
      await store.setIfAbsent(short, 'v', 600);
      const renewed = key('renew');
      await store.setIfAbsent(renewed, 'v1', 600);
      await sleep(200);
      assert.equal(await store.compareAndSet(renewed, 'v1', 'v2', 10_000), true);
      await sleep(600);
      assert.equal(await store.get(short), undefined);
      assert.equal(await store.setIfAbsent(short, 'again', 10_000), true);
      assert.equal(await store.get(renewed), 'v2');
    });

    it('keeps values byte for byte (JSON, unicode, empty)', async () => {
      for (const value of ['{"a":1,"b":"ü €"}', '', 'line\nbreak\u0000nul']) {
        const k = key('bytes');
        await store.setIfAbsent(k, value, 10_000);
        assert.equal(await store.get(k), value);
      }
    });

    it('delivers a publication to every subscriber of the channel, and stops after unsubscribe', async () => {
      const channel = key('channel');
      const seenA: string[] = [];
      const seenB: string[] = [];
      const stopA = await store.subscribe(channel, (m) => seenA.push(m));
      const stopB = await store.subscribe(channel, (m) => seenB.push(m));
      await store.publish(channel, 'generation-7');
      await waitFor('the condition', () => seenA.length === 1 && seenB.length === 1);
      assert.deepEqual(seenA, ['generation-7']);
      await stopA();
      await store.publish(channel, 'generation-8');
      await waitFor('the condition', () => seenB.length === 2);
      assert.deepEqual(seenA, ['generation-7']);
      assert.deepEqual(seenB, ['generation-7', 'generation-8']);
      await stopB();
    });

    it('reports itself available while it answers', () => {
      assert.equal(store.isAvailable(), true);
    });
  });
}
