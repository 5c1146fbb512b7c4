// Fleet token edge cases found in review: a replica stopped in the middle of the fleet's refresh, logins
// while the store is away (the cooldown still holds), and a Redis that came back empty and was given the newest
// token under a lower generation number.
import assert from 'node:assert/strict';
import { afterEach, describe, it } from 'node:test';
import { MemoryStateStore } from '../../src/state/memory-store.js';
import { TOKEN_RECORD_KEY, decodeRecord, encodeRecord } from '../../src/token/fleet-record.js';
import { FAST, StrictGateway, replica, twoWithTokens, type Replica } from './fleet-support.js';
import { waitFor } from '../support/wait-for.js';

const running: Replica[] = [];
afterEach(() => {
  for (const r of running.splice(0)) r.tokens.stop();
});

function start(shared: MemoryStateStore, gateway: StrictGateway, options = FAST, storeUp = true): Replica {
  const r = replica(shared, gateway, options);
  running.push(r);
  r.store.setAvailable(storeUp);
  r.tokens.start();
  return r;
}

const access = (r: Replica): string | undefined => r.tokens.usableToken()?.accessToken.reveal();

async function storedAccess(shared: MemoryStateStore): Promise<string | undefined> {
  return decodeRecord(await shared.get(TOKEN_RECORD_KEY))?.accessToken.reveal();
}

async function refuse(r: Replica): Promise<string> {
  return (await r.tokens.tokenAfterRejection(r.tokens.usableToken()!.generation)).accessToken.reveal();
}

describe('fleet token: edge cases', () => {
  it('a replica stopped while its refresh is at the gateway: the new token still reaches the fleet, no login', async () => {
    const { shared, gateway, a, b } = await twoWithTokens(start);
    gateway.latencyMs = 200;
    void refuse(a).catch(() => undefined);
    await waitFor('the refresh at the gateway', () => gateway.refreshes() === 1);
    // What shutdown does: stop the manager, let a grant in flight settle, close the store last.
    a.tokens.stop();
    await a.tokens.settle();
    a.store.setAvailable(false);
    await waitFor('b took the refreshed token', () => access(b) === 'access-2', 2_000);
    assert.equal(await storedAccess(shared), 'access-2', 'the new token is in the store, not lost with the pod');
    assert.equal(gateway.logins(), 1, 'nobody logged in to replace a refresh token spent by a pod that went away');
  });

  it('the store gone between the grant and the write: the granted tokens are kept, then shared, no login', async () => {
    const { shared, gateway, a, b } = await twoWithTokens(start);
    gateway.latencyMs = 200;
    const refreshed = refuse(a);
    await waitFor('the refresh at the gateway', () => gateway.refreshes() === 1);
    a.store.setAvailable(false); // the refresh token is spent now, its successor must not be lost
    assert.equal(await refreshed, 'access-2', 'a resends with the tokens the gateway granted');
    assert.equal(await storedAccess(shared), 'access-1', 'not in the store yet');
    a.store.setAvailable(true);
    await waitFor('b took them from the store', () => access(b) === 'access-2', 2_000);
    assert.equal(await storedAccess(shared), 'access-2');
    assert.deepEqual(
      gateway.calls.map((c) => c.grant),
      ['password', 'refresh_token'],
    );
  });

  it('store away: a replica logs in on its own at most once per cooldown, the others logging it out or not', async () => {
    const shared = new MemoryStateStore();
    const gateway = new StrictGateway();
    const options = { ...FAST, loginCooldownMs: 600 };
    const a = start(shared, gateway, options);
    await waitFor('a token', () => a.tokens.hasValidToken());
    a.store.setAvailable(false);
    await new Promise((r) => setTimeout(r, 650)); // past the cooldown of a's first login
    await gateway.passwordGrant(); // another replica, alone as well, logs in: a's tokens are revoked
    assert.equal(await refuse(a), 'access-3', 'its refresh token was revoked: a logs in');
    await gateway.passwordGrant(); // and again, at once
    const logins = gateway.logins();
    await assert.rejects(refuse(a), { code: 'sidecar.token.unavailable' });
    assert.equal(gateway.logins(), logins, 'not a second login of its own within the cooldown');
    assert.match(a.logs.text, /"reason":"this replica logged in less than 600 ms ago/);
    await waitFor('a logged in again after the cooldown', () => a.tokens.hasValidToken(), 3_000);
    assert.equal(gateway.logins(), logins + 1);
  });

  it('a replica that sees the fleet token dead before the others do does not share it again as unspent', async () => {
    const shared = new MemoryStateStore();
    const gateway = new StrictGateway();
    let aheadMs = 0;
    const a = start(shared, gateway, { ...FAST, gatewayNow: () => Date.now() + aheadMs });
    const b = start(shared, gateway);
    await waitFor('tokens', () => a.tokens.hasValidToken() && b.tokens.hasValidToken());
    // A holder claimed the record, sent its refresh token and vanished (its lock has expired since).
    const raw = (await shared.get(TOKEN_RECORD_KEY))!;
    const record = decodeRecord(raw)!;
    await shared.compareAndSet(
      TOKEN_RECORD_KEY,
      raw,
      encodeRecord({ ...record, refreshSpent: true, fence: 'gone' }),
      60_000,
    );
    void gateway.refreshGrant(record.refreshToken);
    // a learns that the gateway's clock is ahead: by it, the record's token is about to expire.
    aheadMs = gateway.accessTtlMs - 1_000;
    a.store.setAvailable(false);
    a.store.setAvailable(true); // a rejoins
    await new Promise((r) => setTimeout(r, 100));
    assert.equal(decodeRecord(await shared.get(TOKEN_RECORD_KEY))?.refreshSpent, true, 'still marked spent');
    await refuse(b);
    const sent = gateway.calls.flatMap((c) => (c.refreshToken ? [c.refreshToken] : []));
    assert.deepEqual(sent, [record.refreshToken.reveal()], 'the spent refresh token is not sent again');
  });

  it('Redis back empty, the newest token re-shared under a lower generation: the others take it, no gateway call', async () => {
    const { shared, gateway, a, b } = await twoWithTokens(start);
    await refuse(a);
    await refuse(a); // generation 3 for the fleet
    await waitFor('b on generation 3', () => access(b) === 'access-3');
    // c cannot reach Redis at start and logs in alone (revoking the fleet's tokens); then Redis restarts empty.
    const c = start(shared, gateway, FAST, false);
    await waitFor('c logged in alone', () => access(c) === 'access-4');
    await shared.compareAndDelete(TOKEN_RECORD_KEY, (await shared.get(TOKEN_RECORD_KEY))!);
    a.store.hears = false; // a misses the announcement: only its 401 check can tell it
    c.store.setAvailable(false);
    c.store.setAvailable(true); // c rejoins: its token goes into the empty store, generation 1
    const until = Date.now() + 2_000;
    while ((await storedAccess(shared)) !== 'access-4' && Date.now() < until)
      await new Promise((r) => setTimeout(r, 5));
    assert.equal(decodeRecord(await shared.get(TOKEN_RECORD_KEY))?.generation, 1);
    await waitFor('b heard of it and took it', () => access(b) === 'access-4', 2_000);
    const calls = gateway.calls.length;
    assert.equal(await refuse(a), 'access-4', "a's 401 check takes the store's newer token");
    assert.equal(gateway.calls.length, calls, 'without a gateway call');
  });

  it('Redis back empty, a newer token re-shared under the very number the others hold: they take it', async () => {
    const shared = new MemoryStateStore();
    const gateway = new StrictGateway();
    const a = start(shared, gateway);
    await waitFor('a token', () => a.tokens.hasValidToken());
    const b = start(shared, gateway);
    await waitFor('b on the fleet token, generation 1', () => access(b) === access(a));
    assert.equal(decodeRecord(await shared.get(TOKEN_RECORD_KEY))?.generation, 1);
    // c cannot reach Redis at start and logs in alone; then Redis restarts empty and c shares its newer token,
    // as generation 1 again: the number a and b hold for the older one.
    const c = start(shared, gateway, FAST, false);
    await waitFor('c logged in alone', () => access(c) !== undefined && access(c) !== access(a));
    await shared.compareAndDelete(TOKEN_RECORD_KEY, (await shared.get(TOKEN_RECORD_KEY))!);
    c.store.setAvailable(false);
    c.store.setAvailable(true);
    await waitFor('c shared its token', async () => (await storedAccess(shared)) === access(c));
    assert.equal(decodeRecord(await shared.get(TOKEN_RECORD_KEY))?.generation, 1);
    await waitFor('a and b took it', () => access(a) === access(c) && access(b) === access(c), 2_000);
  });
});
