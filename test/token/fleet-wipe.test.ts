// The fleet token when Redis comes back empty (docs/fleet.md, "A Redis that comes back empty"): the record and the
// lock are gone. Against the strictest token endpoint (a login revokes every earlier token, a refresh token works
// once) the fleet goes on from the tokens its replicas hold: shared again at the wipe notice, refreshed with a
// replica's own refresh token, never a password login, never a refresh token sent twice.
import assert from 'node:assert/strict';
import { afterEach, describe, it } from 'node:test';
import { Secret } from '../../src/config/secret.js';
import { createLogger } from '../../src/observability/log.js';
import { MemoryStateStore } from '../../src/state/memory-store.js';
import {
  FleetRecords,
  TOKEN_RECORD_KEY,
  decodeRecord,
  encodeRecord,
  type SharedTokenRecord,
} from '../../src/token/fleet-record.js';
import { FleetLock, TOKEN_LOCK_KEY } from '../../src/token/fleet-lock.js';
import { FleetToken, type FleetGrants, type FleetTokenOptions, type WipeNotices } from '../../src/token/fleet-token.js';
import { CapturedOutput } from '../support/sidecar.js';
import type { StrictGateway } from './fleet-support.js';
import { FAST, replica, twoWithTokens, type Replica } from './fleet-support.js';
import { waitFor } from '../support/wait-for.js';

const running: Replica[] = [];
const quiet = createLogger('silent', new CapturedOutput());
const reporter = { tokenLockWait: () => undefined, tokenAdopted: () => undefined };

/** When the chain of the records below began: one login, an hour before the tests. */
const LOGIN_AT_MS = Date.now() - 3_600_000;

/** A record as the fleet writes it: `access-n` / `refresh-n`, issued `issuedAgoMs` ago in the one chain. */
function fleetRecord(n: number, generation: number, issuedAgoMs: number): SharedTokenRecord {
  const now = Date.now();
  return {
    generation,
    accessToken: new Secret(`access-${n}`),
    refreshToken: new Secret(`refresh-${n}`),
    accessExpiresAtMs: now + 600_000,
    refreshExpiresAtMs: now + 8 * 3_600_000,
    refreshSpent: false,
    loginAtMs: LOGIN_AT_MS,
    issuedAtMs: now - issuedAgoMs,
  };
}

/** Grants that must not be made. */
const noGrants: FleetGrants = {
  refresh: () => assert.fail('no refresh may be sent'),
  login: () => assert.fail('no login may be sent'),
  heldMark: () => ({ mark: () => Promise.resolve(true), unmark: () => Promise.resolve(true) }),
};
afterEach(() => {
  for (const r of running.splice(0)) r.tokens.stop();
});

/** The store's epoch as the fleet hears of it: `wipe()` tells every replica at once. */
class Wipes implements WipeNotices {
  private readonly listeners: Array<() => void> = [];
  onWipe(listener: () => void): void {
    this.listeners.push(listener);
  }
  wipe(): void {
    for (const listener of this.listeners) listener();
  }
}

function start(shared: MemoryStateStore, gateway: StrictGateway, options: FleetTokenOptions = FAST): Replica {
  const r = replica(shared, gateway, options);
  running.push(r);
  r.tokens.start();
  return r;
}

const access = (r: Replica): string | undefined => r.tokens.usableToken()?.accessToken.reveal();

async function storedAccess(shared: MemoryStateStore): Promise<string | undefined> {
  return decodeRecord(await shared.get(TOKEN_RECORD_KEY))?.accessToken.reveal();
}

/** What FLUSHALL does to the fleet's keys. */
async function wipeStore(shared: MemoryStateStore): Promise<void> {
  for (const key of [TOKEN_RECORD_KEY, TOKEN_LOCK_KEY]) {
    const value = await shared.get(key);
    if (value !== undefined) await shared.compareAndDelete(key, value);
  }
}

async function refuse(r: Replica): Promise<string> {
  return (await r.tokens.tokenAfterRejection(r.tokens.usableToken()!.generation)).accessToken.reveal();
}

const refreshTokensSent = (gateway: StrictGateway): string[] =>
  gateway.calls.flatMap((call) => (call.refreshToken === undefined ? [] : [call.refreshToken]));

describe('fleet token: a Redis that comes back empty', () => {
  it('a wipe notice: the token is shared again at once, without a gateway call', async () => {
    const wipes = new Wipes();
    const { shared, gateway, a, b } = await twoWithTokens(start, { ...FAST, wipes });
    const held = access(a);
    await wipeStore(shared);
    const calls = gateway.calls.length;
    wipes.wipe();
    await waitFor('the record back', async () => (await storedAccess(shared)) === held, 1_000);
    assert.equal(access(b), held);
    assert.equal(gateway.calls.length, calls, 'no login, no refresh');
  });

  it('a refresh that finds no record: made with the replica’s own refresh token, not a password login', async () => {
    const { shared, gateway, a, b } = await twoWithTokens(start);
    await wipeStore(shared);
    assert.equal(await refuse(a), 'access-2');
    assert.equal(gateway.logins(), 1, 'no login: it would revoke every other replica’s token');
    assert.deepEqual(refreshTokensSent(gateway), ['refresh-1']);
    assert.equal(await storedAccess(shared), 'access-2', 'the fleet has a record again');
    await waitFor('b took it', () => access(b) === 'access-2', 2_000);
  });

  it('a wipe while a refresh is at the gateway: the holder writes its lock back first, the others wait for its token', async () => {
    const wipes = new Wipes();
    const { shared, gateway, a, b } = await twoWithTokens(start, { ...FAST, wipes });
    gateway.latencyMs = 300;
    const refreshed = refuse(a);
    await waitFor('the refresh at the gateway', () => gateway.refreshes() === 1);
    await wipeStore(shared);
    wipes.wipe();
    await waitFor('the lock back', async () => (await shared.get(TOKEN_LOCK_KEY)) !== undefined, 200);
    // b finds no record and no token it could use: without the lock it would refresh with refresh-1 (spent by a a
    // moment ago), be refused, and log in, revoking the token a is about to get.
    const [got, taken] = await Promise.all([refreshed, refuse(b)]);
    assert.equal(got, 'access-2');
    assert.equal(taken, 'access-2');
    assert.deepEqual(refreshTokensSent(gateway), ['refresh-1']);
    assert.equal(gateway.logins(), 1);
  });

  it('a refresh due while the record is gone, the token still good: shared again, not refreshed', async () => {
    const shared = new MemoryStateStore();
    const fleet = new FleetToken(shared, reporter, quiet, FAST);
    const held = fleetRecord(1, 5, 60_000);
    const got = await fleet.acquire({ held, local: false, usable: true }, noGrants);
    assert.equal(got.via, 'written');
    assert.equal(got.record.accessToken.reveal(), 'access-1');
    assert.equal(got.record.generation, 6);
    assert.equal(await storedAccess(shared), 'access-1');
  });

  it('a grant that was at the gateway when the record went: written over an older token shared meanwhile', async () => {
    const shared = new MemoryStateStore();
    const records = new FleetRecords(shared, new FleetLock(shared, 2_000, 20), reporter, () => undefined, Date.now);
    const claim = encodeRecord({ ...fleetRecord(1, 5, 60_000), refreshSpent: true, fence: 'holder' });
    // The wipe took the holder's claim; another replica then shared access-1, whose refresh token the holder spent.
    await shared.compareAndSet(TOKEN_RECORD_KEY, undefined, encodeRecord(fleetRecord(1, 6, 60_000)), 60_000);
    const got = await records.write(claim, fleetRecord(2, 6, 0));
    assert.equal(got.via, 'written');
    assert.equal(await storedAccess(shared), 'access-2');
    // Not the other way round: a token issued before the stored one is never written over it.
    const late = await records.write(claim, fleetRecord(1, 6, 60_000));
    assert.equal(late.via, 'adopted');
    assert.equal(late.record.accessToken.reveal(), 'access-2');
    assert.equal(await storedAccess(shared), 'access-2');
  });

  it('an older token shared after the wipe: the holder of the newer one refreshes from its own, no refresh token twice', async () => {
    const { shared, gateway, a, b } = await twoWithTokens(start);
    b.store.hears = false; // b misses the next announcement, and stays on access-1 for now
    assert.equal(await refuse(a), 'access-2');
    assert.equal(access(b), 'access-1');
    await wipeStore(shared);
    // b is first to share after the wipe: its older token, whose refresh token a spent to get access-2. a does not
    // hear of it (else it would share its newer one at once): its refresh is what meets the older record.
    a.store.hears = false;
    b.store.setAvailable(false);
    b.store.setAvailable(true);
    await waitFor('b shared access-1', async () => (await storedAccess(shared)) === 'access-1', 1_000);
    assert.equal(await refuse(a), 'access-3', 'a refreshed from access-2, its own');
    assert.deepEqual(refreshTokensSent(gateway), ['refresh-1', 'refresh-2'], 'refresh-1 never sent again');
    assert.equal(gateway.logins(), 1);
  });
});
