// One token for the fleet, with TokenManagers sharing one store as replicas would share Redis, and a
// token endpoint on which only the newest login's chain works and every refresh token works once.
import assert from 'node:assert/strict';
import { afterEach, describe, it } from 'node:test';
import { MemoryStateStore } from '../../src/state/memory-store.js';
import { createLogger } from '../../src/observability/log.js';
import { fleetTokenFor } from '../../src/token/fleet-token.js';
import { TOKEN_LOCK_KEY } from '../../src/token/fleet-lock.js';
import { TOKEN_RECORD_KEY, decodeRecord, encodeRecord } from '../../src/token/fleet-record.js';
import { FAST, StrictGateway, replica, twoWithTokens, type Replica } from './fleet-support.js';
import { waitFor } from '../support/wait-for.js';

const running: Replica[] = [];
afterEach(() => {
  for (const r of running.splice(0)) r.tokens.stop();
});

function start(
  shared: MemoryStateStore,
  gateway: StrictGateway,
  ...rest: Parameters<typeof replica> extends [unknown, unknown, ...infer R] ? R : never
): Replica {
  const r = replica(shared, gateway, ...rest);
  running.push(r);
  r.tokens.start();
  return r;
}

async function stored(shared: MemoryStateStore) {
  const record = decodeRecord(await shared.get(TOKEN_RECORD_KEY));
  assert.ok(record, 'a record in the store');
  return record;
}

/** Marks the stored record's refresh token as spent, as a holder does right before sending it. */
async function markRefreshSpent(shared: MemoryStateStore): Promise<void> {
  const record = await stored(shared);
  await shared.compareAndSet(
    TOKEN_RECORD_KEY,
    encodeRecord(record),
    encodeRecord({ ...record, refreshSpent: true }),
    60_000,
  );
}

const access = (r: Replica): string | undefined => r.tokens.usableToken()?.accessToken.reveal();
const sentRefreshTokens = (g: StrictGateway) => g.calls.flatMap((c) => (c.refreshToken ? [c.refreshToken] : []));

describe('fleet token: one token for every replica', () => {
  it('five replicas starting together log in once and share that token', async () => {
    const shared = new MemoryStateStore();
    const gateway = new StrictGateway();
    const fleet = Array.from({ length: 5 }, () => start(shared, gateway));
    await waitFor('every replica has a token', () => fleet.every((r) => r.tokens.hasValidToken()));
    assert.equal(gateway.logins(), 1);
    assert.equal(new Set(fleet.map(access)).size, 1, 'one token');
    assert.equal(gateway.accepts(fleet[0]!.tokens.usableToken()!.accessToken), true);
    assert.equal((await stored(shared)).generation, 1);
    for (const r of fleet) assert.equal(await r.metric('signing_sidecar_token_generation'), 1);
    const adopted = await Promise.all(fleet.map((r) => r.metric('signing_sidecar_token_adopted_total')));
    assert.equal(
      adopted.reduce((a, b) => a + b),
      4,
      'the four others adopted it',
    );
  });

  it('requests never wait on the store while the token in memory is valid; the memory store is no fleet', async () => {
    const shared = new MemoryStateStore();
    const gateway = new StrictGateway();
    const r = start(shared, gateway);
    await waitFor('a token', () => r.tokens.hasValidToken());
    const before = r.store.calls;
    const tokens = await Promise.all(Array.from({ length: 1_000 }, () => r.tokens.token()));
    assert.equal(r.store.calls, before, 'not one store command');
    assert.equal(new Set(tokens.map((t) => t.generation)).size, 1);
    const clock = { timestampMs: (ms: number) => ms };
    const upstream = {
      connectTimeoutMs: 5_000,
      responseTimeoutMs: 30_000,
      now: Date.now,
      recordRefused: () => undefined,
    };
    assert.equal(fleetTokenFor(shared, clock, r.metrics, createLogger('silent'), upstream), undefined);
  });

  it('two replicas refreshing at the same moment: one refresh reaches the gateway, no refresh token sent twice', async () => {
    const shared = new MemoryStateStore();
    const gateway = new StrictGateway();
    // Refresh ahead by half the lifetime, no jitter: both replicas' timers fire at the same moment.
    gateway.accessTtlMs = 4_000;
    const a = start(shared, gateway, FAST, { refreshAheadSeconds: 60 });
    await waitFor('a token on a', () => a.tokens.hasValidToken());
    const b = start(shared, gateway, FAST, { refreshAheadSeconds: 60 });
    await waitFor('b adopted it', () => b.tokens.hasValidToken());
    await waitFor('both moved to generation 2', () =>
      [a, b].every((r) => r.tokens.usableToken()?.accessToken.reveal() === 'access-2'),
    );
    a.tokens.stop();
    b.tokens.stop();
    assert.deepEqual(
      gateway.calls.map((c) => c.grant),
      ['password', 'refresh_token'],
    );
    assert.equal(new Set(sentRefreshTokens(gateway)).size, sentRefreshTokens(gateway).length);
    const waits = (await a.metrics.registry.metrics()) + (await b.metrics.registry.metrics());
    assert.match(waits, /signing_sidecar_token_lock_wait_seconds_count [1-9]/, 'the other one waited on the lock');
  });

  it('many 401s on several replicas at once: one refresh for the fleet, each replica resends with the new token', async () => {
    const shared = new MemoryStateStore();
    const gateway = new StrictGateway();
    const fleet = Array.from({ length: 3 }, () => start(shared, gateway));
    await waitFor('tokens', () => fleet.every((r) => r.tokens.hasValidToken()));
    const refused = fleet.map((r) => r.tokens.usableToken()!);
    const fresh = await Promise.all(
      fleet.flatMap((r, i) => Array.from({ length: 20 }, () => r.tokens.tokenAfterRejection(refused[i]!.generation))),
    );
    assert.equal(gateway.refreshes(), 1);
    assert.equal(gateway.logins(), 1);
    assert.equal(new Set(fresh.map((t) => t.accessToken.reveal())).size, 1);
    assert.equal(gateway.accepts(fresh[0]!.accessToken), true);
  });

  it('a 401 when the store already holds a newer generation: adopted and resent without a gateway call', async () => {
    const shared = new MemoryStateStore();
    const gateway = new StrictGateway();
    const a = start(shared, gateway);
    await waitFor('a token', () => a.tokens.hasValidToken());
    const b = start(shared, gateway);
    await waitFor('b adopted it', () => b.tokens.hasValidToken());
    b.store.hears = false; // b misses the announcement: only the 401 check can tell it
    const old = b.tokens.usableToken()!;
    await a.tokens.tokenAfterRejection(a.tokens.usableToken()!.generation);
    assert.equal(access(b), old.accessToken.reveal(), 'b did not hear of it');
    const calls = gateway.calls.length;
    const next = await b.tokens.tokenAfterRejection(old.generation);
    assert.equal(gateway.calls.length, calls, 'no gateway call');
    assert.equal(next.accessToken.reveal(), access(a));
    assert.ok(next.generation > old.generation, 'a newer generation, so the gateway exchange resends once');
    assert.match(b.logs.text, /"event":"token.adopted","generation":2/);
  });

  it('a refresh whose answer was lost is spent: the holder logs in, the refresh token is never sent again', async () => {
    const { gateway, a, b } = await twoWithTokens(start);
    gateway.nextRefresh.push('lost');
    const next = await a.tokens.tokenAfterRejection(a.tokens.usableToken()!.generation);
    assert.deepEqual(
      gateway.calls.map((c) => c.grant),
      ['password', 'refresh_token', 'password'],
    );
    assert.equal(gateway.accepts(next.accessToken), true);
    await waitFor('b heard of it', () => access(b) === next.accessToken.reveal());
    assert.equal(new Set(sentRefreshTokens(gateway)).size, sentRefreshTokens(gateway).length);
  });

  it('a record left spent by a holder that vanished: the next holder logs in instead of sending it', async () => {
    const shared = new MemoryStateStore();
    const gateway = new StrictGateway();
    const a = start(shared, gateway);
    await waitFor('a token', () => a.tokens.hasValidToken());
    // The holder marked the refresh spent, then died (its lock simply expires).
    await markRefreshSpent(shared);
    const b = start(shared, gateway);
    await waitFor('b adopted', () => b.tokens.hasValidToken());
    await new Promise((r) => setTimeout(r, FAST.loginCooldownMs! + 10)); // the fleet-wide login cooldown
    const next = await b.tokens.tokenAfterRejection(b.tokens.usableToken()!.generation);
    assert.deepEqual(
      gateway.calls.map((c) => c.grant),
      ['password', 'password'],
    );
    assert.equal(sentRefreshTokens(gateway).length, 0);
    assert.equal(gateway.accepts(next.accessToken), true);
  });

  it('a login within the fleet-wide cooldown of the last one is put off, then made once', async () => {
    const shared = new MemoryStateStore();
    const gateway = new StrictGateway();
    const slow = { ...FAST, loginCooldownMs: 400 };
    const a = start(shared, gateway, slow);
    await waitFor('a token', () => a.tokens.hasValidToken());
    await markRefreshSpent(shared);
    const b = start(shared, gateway, slow);
    await waitFor('b adopted', () => b.tokens.hasValidToken());
    await assert.rejects(b.tokens.tokenAfterRejection(b.tokens.usableToken()!.generation), {
      code: 'sidecar.token.unavailable',
    });
    assert.equal(gateway.logins(), 1, 'not while another login is this recent');
    assert.match(
      b.logs.text,
      /"event":"token.retry_scheduled".*"reason":"another replica logged in less than 400 ms ago/,
    );
    await waitFor('b logged in after the cooldown', () => gateway.logins() === 2 && b.tokens.hasValidToken());
    await waitFor('a took it', () => access(a) === access(b));
    assert.equal(gateway.logins(), 2);
  });

  it('a holder whose lock expired does not overwrite the newer record written by the next holder', async () => {
    const shared = new MemoryStateStore();
    const gateway = new StrictGateway();
    // a's lock lives 100 ms and its refresh takes 400; a cannot push the lock out (its commands on the lock key
    // fail, as in a blip between a and Redis), so b takes the lock meanwhile and logs in.
    const a = start(shared, gateway, { ...FAST, lockTtlMs: 100, grantTimeoutMs: 2_000 });
    await waitFor('a token', () => a.tokens.hasValidToken());
    const b = start(shared, gateway);
    await waitFor('b adopted', () => b.tokens.hasValidToken());
    gateway.latencyMs = 400;
    a.store.failKey = TOKEN_LOCK_KEY;
    const aGot = a.tokens.tokenAfterRejection(a.tokens.usableToken()!.generation);
    await waitFor('a took the lock', () => gateway.refreshes() === 1);
    await new Promise((r) => setTimeout(r, 150));
    gateway.latencyMs = 600;
    const bGot = await b.tokens.tokenAfterRejection(b.tokens.usableToken()!.generation);
    await aGot;
    assert.deepEqual(
      gateway.calls.map((c) => c.grant),
      ['password', 'refresh_token', 'password'],
    );
    const record = await stored(shared);
    assert.equal(record.accessToken.reveal(), bGot.accessToken.reveal(), "b's record stands");
    assert.equal(gateway.accepts(record.accessToken), true);
    await waitFor('a is on the fleet token again', () => access(a) === record.accessToken.reveal());
  });

  it('a grant slower than the lock lifetime keeps the lock: nobody else refreshes or logs in, its token is used', async () => {
    // The lock lives 150 ms, the refresh takes 600 (under the 2 s grant timeout): the holder pushes the lock out.
    const options = { ...FAST, lockTtlMs: 150, grantTimeoutMs: 2_000 };
    const { shared, gateway, a, b } = await twoWithTokens(start, options);
    gateway.latencyMs = 600;
    const aGot = a.tokens.tokenAfterRejection(a.tokens.usableToken()!.generation);
    await waitFor('a sent its refresh', () => gateway.refreshes() === 1);
    await new Promise((r) => setTimeout(r, 300)); // two lock lifetimes into the refresh
    const bGot = b.tokens.tokenAfterRejection(b.tokens.usableToken()!.generation);
    const [fromA, fromB] = await Promise.all([aGot, bGot]);
    assert.deepEqual(
      gateway.calls.map((c) => c.grant),
      ['password', 'refresh_token'],
      'one refresh, no login',
    );
    assert.equal(fromA.accessToken.reveal(), fromB.accessToken.reveal(), 'b took the refreshed token');
    assert.equal(gateway.accepts(fromA.accessToken), true);
    assert.equal((await stored(shared)).accessToken.reveal(), fromA.accessToken.reveal());
  });
});

describe('fleet token: the store away and back', () => {
  it('store away at start: the replica logs in on its own once the store-back wait is over, counted and logged', async () => {
    const shared = new MemoryStateStore();
    const gateway = new StrictGateway();
    const constructed = performance.now();
    const r = replica(shared, gateway, { ...FAST, storeBackWaitMs: 400 });
    running.push(r);
    r.store.setAvailable(false);
    r.tokens.start();
    await r.tokens.token();
    assert.ok(performance.now() - constructed >= 400, 'not before the store was away 400 ms');
    assert.equal(gateway.logins(), 1);
    assert.equal(await r.metric('signing_sidecar_token_store_fallbacks_total'), 1);
    assert.match(r.logs.text, /"event":"token.store_fallback"/);
  });

  it('a login alone that fails, the store still away, is tried again without waiting for the store again', async () => {
    const gateway = new StrictGateway();
    gateway.unreachableLogins = 1;
    const r = replica(new MemoryStateStore(), gateway, { ...FAST, storeBackWaitMs: 1_000 });
    running.push(r);
    r.store.setAvailable(false);
    r.tokens.start();
    await waitFor('the login alone, after the wait', () => gateway.logins() === 1, 5_000);
    const firstAt = performance.now();
    await waitFor('a token of its own, from the next login', () => r.tokens.hasValidToken(), 5_000);
    assert.equal(gateway.logins(), 2);
    // The backoff is at most 100 ms (FAST): well under a second wait of 1 s, even on a loaded host.
    assert.ok(performance.now() - firstAt < 800, `tried again ${(performance.now() - firstAt).toFixed(0)} ms later`);
  });

  it('store away while the token is valid: kept to its end, no refresh behind the fleet’s back', async () => {
    const shared = new MemoryStateStore();
    const gateway = new StrictGateway();
    gateway.accessTtlMs = 6_000;
    const r = start(shared, gateway, FAST, { refreshAheadSeconds: 60 });
    await waitFor('a token', () => r.tokens.hasValidToken());
    r.store.setAvailable(false);
    // Refresh ahead was due after 3 s (half the lifetime); the token still works until 2 s before its expiry, 4 s.
    await new Promise((resolve) => setTimeout(resolve, 3_300));
    assert.equal(gateway.calls.length, 1, 'nothing but the first login');
    assert.equal(r.tokens.hasValidToken(), true);
    await waitFor('its own refresh once the token ran out', () => gateway.refreshes() === 1, 5_000);
    assert.equal(await r.metric('signing_sidecar_token_store_fallbacks_total'), 1);
    assert.equal(gateway.logins(), 1);
  });

  it('a 401 while the store is away: its own refresh; the store back: the fleet takes that token, no login', async () => {
    const { shared, gateway, a, b } = await twoWithTokens(start);
    b.store.setAvailable(false);
    const own = await b.tokens.tokenAfterRejection(b.tokens.usableToken()!.generation);
    assert.deepEqual(
      gateway.calls.map((c) => c.grant),
      ['password', 'refresh_token'],
    );
    assert.equal(await b.metric('signing_sidecar_token_store_fallbacks_total'), 1);
    b.store.setAvailable(true);
    await waitFor('a took b’s token', () => access(a) === own.accessToken.reveal());
    assert.equal((await stored(shared)).accessToken.reveal(), own.accessToken.reveal());
    assert.equal(access(b), own.accessToken.reveal());
    assert.equal(gateway.logins(), 1, 'no second login');
    // From here on the fleet refreshes b's chain, once.
    await a.tokens.tokenAfterRejection(a.tokens.usableToken()!.generation);
    await waitFor('b on it too', () => access(b) === access(a));
    assert.equal(gateway.refreshes(), 2);
    assert.equal(new Set(sentRefreshTokens(gateway)).size, 2);
  });

  it('store back after a replica logged in alone: its later login wins, the others adopt it, no third login', async () => {
    const shared = new MemoryStateStore();
    const gateway = new StrictGateway();
    const a = start(shared, gateway);
    await waitFor('a token', () => a.tokens.hasValidToken());
    const b = replica(shared, gateway);
    running.push(b);
    b.store.setAvailable(false);
    b.tokens.start();
    await waitFor('b logged in alone', () => b.tokens.hasValidToken());
    assert.equal(gateway.logins(), 2);
    assert.equal(gateway.accepts(a.tokens.usableToken()!.accessToken), false, 'b’s login logged a out');
    b.store.setAvailable(true);
    await waitFor('a adopted b’s token', () => access(a) === access(b));
    assert.equal(gateway.accepts(a.tokens.usableToken()!.accessToken), true);
    assert.equal(gateway.logins(), 2);
    assert.equal((await stored(shared)).accessToken.reveal(), access(b));
  });
});
