// A replica's first token while its store is still making its first connection (slow Sentinels when a fleet
// starts together), or away for a moment (a command over its timeout on a loaded host): it waits for the store
// instead of logging in alone, where each replica's login would revoke the others' tokens. A store that fails is
// waited for the store-back wait, one that neither answers nor fails up to the first-connect bound.
import assert from 'node:assert/strict';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterEach, describe, it } from 'node:test';
import { MemoryStateStore } from '../../src/state/memory-store.js';
import { FAST, StrictGateway, replica, type Replica } from './fleet-support.js';
import { waitFor } from '../support/wait-for.js';

const running: Replica[] = [];
afterEach(() => {
  for (const r of running.splice(0)) r.tokens.stop();
});

/** A replica whose store has neither answered nor failed yet, its token manager started. */
function startConnecting(shared: MemoryStateStore, gateway: StrictGateway, options = FAST): Replica {
  const r = replica(shared, gateway, options, { storeConnecting: true });
  running.push(r);
  r.tokens.start();
  return r;
}

const access = (r: Replica): string | undefined => r.tokens.usableToken()?.accessToken.reveal();
const fallbacks = (r: Replica): number => r.logs.text.split('"event":"token.store_fallback"').length - 1;

describe('fleet token: the first token while the store is still connecting', () => {
  it('replicas started together wait for their stores: one password login for the fleet, none alone', async () => {
    const shared = new MemoryStateStore();
    const gateway = new StrictGateway();
    const replicas = [0, 1, 2].map(() => startConnecting(shared, gateway));
    // Longer than every wait of FAST (lock, poll, cooldown, look-again, store-back): only the store is waited for.
    await sleep(300);
    assert.equal(gateway.calls.length, 0, 'no grant while the stores are connecting');
    for (const r of replicas) {
      r.store.setAvailable(true);
      await sleep(30);
    }
    await waitFor('every replica with a token', () => replicas.every((r) => access(r) !== undefined), 3_000);
    assert.equal(gateway.logins(), 1, 'one login for the whole fleet');
    assert.deepEqual(
      replicas.map(access),
      replicas.map(() => access(replicas[0]!)),
      "every replica on the fleet's token",
    );
    assert.deepEqual(replicas.map(fallbacks), [0, 0, 0], 'no replica got a token of its own');
  });

  it('a store that fails while connecting: the replica logs in alone once the store-back wait is over', async () => {
    const gateway = new StrictGateway();
    const startedAt = Date.now();
    const r = startConnecting(new MemoryStateStore(), gateway, { ...FAST, storeBackWaitMs: 600 });
    await sleep(100);
    assert.equal(gateway.calls.length, 0);
    r.store.setAvailable(false);
    await sleep(200);
    assert.equal(gateway.calls.length, 0, 'the store failed, but has not been away 600 ms since the start');
    await waitFor('a token of its own', () => access(r) !== undefined, 3_000);
    assert.ok(Date.now() - startedAt >= 600, 'not before the store was away 600 ms');
    assert.equal(fallbacks(r), 1);
    assert.equal(gateway.logins(), 1);
  });

  // Found in CI: three sidecars starting together on a loaded host, each store's first commands over their 100 ms
  // timeout for a moment; each replica logged in alone and the gateway revoked the others' tokens.
  it('stores that fail for a moment as the fleet starts: waited for, one password login, none alone', async () => {
    const shared = new MemoryStateStore();
    const gateway = new StrictGateway();
    const replicas = [0, 1, 2].map(() => startConnecting(shared, gateway, { ...FAST, storeBackWaitMs: 5_000 }));
    for (const r of replicas) r.store.setAvailable(false);
    await sleep(300);
    assert.equal(gateway.calls.length, 0, 'no login alone while the stores are away for a moment');
    for (const r of replicas) r.store.setAvailable(true);
    await waitFor('every replica with a token', () => replicas.every((r) => access(r) !== undefined), 3_000);
    assert.equal(gateway.logins(), 1, 'one login for the whole fleet');
    assert.deepEqual(new Set(replicas.map(access)).size, 1, "every replica on the fleet's token");
    assert.deepEqual(replicas.map(fallbacks), [0, 0, 0], 'no replica got a token of its own');
  });

  it('a replica stopped while it waits (shutdown) ends the wait at once and makes no grant', async () => {
    const gateway = new StrictGateway();
    const r = startConnecting(new MemoryStateStore(), gateway);
    await sleep(100);
    const stoppedAt = Date.now();
    r.tokens.stop();
    await r.tokens.settle(); // what shutdown waits for before it closes the store
    assert.ok(Date.now() - stoppedAt < 1_000, `settled in ${Date.now() - stoppedAt} ms, not at the settle cap`);
    r.store.setAvailable(false); // would send it to a login alone, were it still running
    await sleep(300);
    assert.equal(gateway.calls.length, 0, 'no login from a stopped replica');
    assert.equal(r.logs.text.includes('token.retry_scheduled'), false, 'no retry scheduled by a stopped replica');
  });

  it('the wait is made once: a login alone after it that fails is tried again without waiting again', async () => {
    const gateway = new StrictGateway();
    gateway.unreachableLogins = 1;
    const r = startConnecting(new MemoryStateStore(), gateway, { ...FAST, firstConnectWaitMs: 2_000 });
    await waitFor('the login alone, after the wait', () => gateway.logins() === 1, 5_000);
    const firstAt = Date.now();
    await waitFor('a token of its own, from the next login', () => access(r) !== undefined, 5_000);
    assert.equal(gateway.logins(), 2);
    // The backoff is at most 100 ms (FAST): well under a second wait of 2 s, even on a loaded host.
    assert.ok(Date.now() - firstAt < 1_500, `tried again ${Date.now() - firstAt} ms later: within the backoff`);
  });

  it('a store that neither answers nor fails: the replica logs in alone once the first-connect wait is over', async () => {
    const gateway = new StrictGateway();
    const startedAt = Date.now();
    const r = startConnecting(new MemoryStateStore(), gateway, { ...FAST, firstConnectWaitMs: 600 });
    await sleep(400);
    assert.equal(gateway.calls.length, 0, 'still waiting for the store');
    await waitFor('a token of its own', () => access(r) !== undefined, 3_000);
    assert.ok(Date.now() - startedAt >= 600, 'not before the wait was over');
    assert.equal(fallbacks(r), 1);
    assert.equal(gateway.logins(), 1);
  });
});
