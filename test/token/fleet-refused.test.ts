// Fleet mode while the store is away for one replica (a Redis restart, before that replica's client reconnects):
// against the strictest token endpoint (a login revokes every earlier token, a refresh token works once), a replica
// whose token is due keeps it, refreshes alone only at its end, and a replica whose refresh of the same refresh
// token is then refused (the other one rotated it) takes the successor from the fleet's record instead of logging
// in and revoking every replica's token.
import assert from 'node:assert/strict';
import { afterEach, describe, it } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { MemoryStateStore } from '../../src/state/memory-store.js';
import { DEFAULT_LOOK_AGAIN_MS, DEFAULT_STORE_BACK_WAIT_MS } from '../../src/token/fleet-token.js';
import { FAST, replica, StrictGateway, type Replica } from './fleet-support.js';
import { waitFor } from '../support/wait-for.js';

const running: Replica[] = [];
afterEach(() => {
  for (const r of running.splice(0)) r.tokens.stop();
});

/**
 * 6 s tokens. `aheadSeconds`: how long before expiry the replica refreshes (never more than half the lifetime); a
 * token is usable until 2 s before expiry, when a replica with the store away refreshes alone.
 */
function start(shared: MemoryStateStore, gateway: StrictGateway, aheadSeconds: number): Replica {
  // The look-again times of production: a replica's store comes back within them.
  const options = { ...FAST, lookAgainMs: DEFAULT_LOOK_AGAIN_MS, storeBackWaitMs: DEFAULT_STORE_BACK_WAIT_MS };
  const r = replica(shared, gateway, options, { refreshAheadSeconds: aheadSeconds });
  running.push(r);
  r.tokens.start();
  return r;
}

async function fleetOfTwo(): Promise<{ gateway: StrictGateway; early: Replica; late: Replica }> {
  const shared = new MemoryStateStore();
  const gateway = new StrictGateway();
  gateway.accessTtlMs = 6_000;
  // Refreshes 3 s ahead (due at 3 s, its end at 4 s), the other 1 s ahead (due at 5 s).
  const early = start(shared, gateway, 3);
  await waitFor('the first replica has a token', () => early.tokens.hasValidToken());
  const late = start(shared, gateway, 1);
  await waitFor('both have the token', () => late.tokens.hasValidToken());
  return { gateway, early, late };
}

const access = (r: Replica): string | undefined => r.tokens.usableToken()?.accessToken.reveal();

describe('fleet token while the store is away for one replica', { timeout: 30_000 }, () => {
  it('due with the store away: kept until its end, refreshed alone then; the other refresh refused: the successor adopted, no login', async () => {
    const { gateway, early, late } = await fleetOfTwo();
    early.store.setAvailable(false);
    // Due at 3 s: kept (the store is away), no grant.
    await sleep(3_300);
    assert.equal(gateway.refreshes(), 0, 'a due token is kept while the store is away');
    assert.equal(access(early), 'access-1');
    // At its end (4 s), refreshed alone with the fleet's refresh token.
    await waitFor('the lone refresh', () => access(early) === 'access-2', 3_000);
    // The other replica's refresh, through the fleet with the same refresh token, is refused (rotated): it looks
    // again at the record, where the lone one shares its token once its store is back.
    await waitFor('the refused refresh', () => gateway.refreshes() === 2, 4_000);
    assert.equal(gateway.logins(), 1, 'no login after the refusal');
    early.store.setAvailable(true);
    await waitFor('the successor adopted', () => access(late) === 'access-2', 4_000);
    assert.equal(gateway.logins(), 1, 'one password login in all');
    const held = late.tokens.usableToken();
    assert.ok(held && gateway.accepts(held.accessToken), 'the gateway takes the token it holds');
    assert.match(late.logs.text, /"event":"token.looking_again"/);
  });

  it('refreshed through the fleet first; the lone refresh of the same token refused: the record read again once the store is back, no login', async () => {
    const { gateway, early, late } = await fleetOfTwo();
    // The late replica's store goes away; the early one refreshes through the fleet at 3 s (access-2).
    late.store.setAvailable(false);
    await waitFor('the fleet refresh', () => access(early) === 'access-2', 5_000);
    // The late one, due at 5 s with its token's end at 4 s: refreshes alone with the spent refresh token, refused.
    await waitFor('the refused lone refresh', () => gateway.refreshes() === 2, 4_000);
    assert.equal(gateway.logins(), 1, 'no login while it waits for the store');
    late.store.setAvailable(true);
    await waitFor('the fleet token taken', () => access(late) === 'access-2', 4_000);
    assert.equal(gateway.logins(), 1, 'one password login in all');
    assert.equal(gateway.refreshes(), 2, 'the refused refresh token not sent again');
  });

  it('the store stays away: after looking again, the replica logs in alone (spec 4.1 rule 2)', async () => {
    const { gateway, early, late } = await fleetOfTwo();
    late.store.setAvailable(false);
    await waitFor('the fleet refresh', () => access(early) === 'access-2', 5_000);
    await waitFor('the refused lone refresh', () => gateway.refreshes() === 2, 4_000);
    await waitFor('a login of its own', () => gateway.logins() === 2, 10_000);
    await waitFor('its token', () => late.tokens.hasValidToken(), 2_000);
    const held = late.tokens.usableToken();
    assert.ok(held && gateway.accepts(held.accessToken), 'the gateway takes the token it holds');
    const sent = gateway.calls.flatMap((c) => (c.refreshToken === undefined ? [] : [c.refreshToken]));
    // refresh-1 by each replica (one of them with its store away, which cannot know); none twice by one replica.
    const again = sent.filter((token, i) => sent.indexOf(token) !== i);
    assert.deepEqual(again, ['refresh-1'], `refresh tokens sent: ${sent.join(' ')}`);
  });
});
