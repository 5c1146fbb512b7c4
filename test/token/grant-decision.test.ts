import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import {
  decideGrant,
  sendRefresh,
  type GrantDecision,
  type GrantReason,
  type HeldState,
  type SpentMark,
} from '../../src/token/grant-decision.js';
import type { GrantResult } from '../../src/token/token-set.js';
import { grantNumber } from './fleet-support.js';

type Refresh = HeldState['refresh'];
type Row = readonly [
  access: 'usable' | 'dead',
  refresh: Refresh,
  cooldown: 'cooling' | '-',
  GrantReason,
  GrantDecision,
];

// One row per case that matters: which grant (or none) each state and reason leads to. A refresh token is sent
// only while alive and never right after it failed to leave; a token that still works is never replaced by a
// login when nothing forces it; a login inside the cooldown waits.
const table: readonly Row[] = [
  // A new token is needed (none held, refresh ahead of expiry, a 401, a retry).
  ['dead', 'none', '-', 'renew', 'login'],
  ['dead', 'none', 'cooling', 'renew', 'wait'],
  ['usable', 'alive', '-', 'renew', 'refresh'],
  ['usable', 'alive', 'cooling', 'renew', 'refresh'],
  ['dead', 'alive', '-', 'renew', 'refresh'],
  ['dead', 'spent', '-', 'renew', 'login'],
  ['usable', 'spent', '-', 'renew', 'login'],
  ['usable', 'spent', 'cooling', 'renew', 'wait'],
  ['dead', 'expired', '-', 'renew', 'login'],
  ['dead', 'expired', 'cooling', 'renew', 'wait'],
  // The refresh just tried never left: keep a working token, else log in (the refresh is not tried again now).
  ['usable', 'alive', '-', 'refresh-unsent', 'keep'],
  ['usable', 'alive', 'cooling', 'refresh-unsent', 'keep'],
  ['dead', 'alive', '-', 'refresh-unsent', 'login'],
  ['dead', 'alive', 'cooling', 'refresh-unsent', 'wait'],
  // The fleet's store is away: the token in memory is used to its end before this replica grants on its own.
  ['usable', 'alive', '-', 'store-away', 'keep'],
  ['usable', 'spent', 'cooling', 'store-away', 'keep'],
  ['dead', 'alive', '-', 'store-away', 'refresh'],
  ['dead', 'spent', '-', 'store-away', 'login'],
  ['dead', 'none', 'cooling', 'store-away', 'wait'],
];

describe('the grant decision', () => {
  for (const [access, refresh, cooldown, reason, expected] of table) {
    it(`${access} access, ${refresh} refresh token, ${cooldown === '-' ? 'no cooldown' : cooldown}, ${reason}: ${expected}`, () => {
      const held = { accessUsable: access === 'usable', refresh, loginCoolingDown: cooldown === 'cooling' };
      assert.equal(decideGrant(held, reason), expected);
    });
  }
});

describe('the grant decision in a fleet, the store away or the refresh token rotated by another replica', () => {
  const alive = { refresh: 'alive', loginCoolingDown: false } as const;
  it('due, the store away, the access token still usable: kept (refreshing ahead is a preference, not a need)', () => {
    assert.equal(decideGrant({ ...alive, accessUsable: true }, 'store-away'), 'keep');
  });
  it('the store away and the token at its end: refreshed alone', () => {
    assert.equal(decideGrant({ ...alive, accessUsable: false }, 'store-away'), 'refresh');
  });
  it('a refused refresh whose successor another replica may share: the record is read again before a login', () => {
    const refused = { accessUsable: false, refresh: 'spent', loginCoolingDown: false } as const;
    assert.equal(decideGrant({ ...refused, successorMayBeShared: true }, 'refresh-refused'), 'look-again');
    assert.equal(decideGrant({ ...refused, accessUsable: true, successorMayBeShared: true }, 'renew'), 'look-again');
    // Looked again already (or a single pod): the login spec 4.1 rule 2 asks for, within the cooldown.
    assert.equal(decideGrant({ ...refused, successorMayBeShared: false }, 'refresh-refused'), 'login');
    assert.equal(decideGrant(refused, 'refresh-refused'), 'login');
    assert.equal(decideGrant({ ...refused, loginCoolingDown: true }, 'refresh-refused'), 'wait');
  });
  it('a refresh token still alive is refreshed, whatever another replica was refused; a refused one is never resent', () => {
    assert.equal(decideGrant({ ...alive, accessUsable: false, successorMayBeShared: true }, 'renew'), 'refresh');
    assert.equal(decideGrant({ ...alive, accessUsable: false }, 'refresh-refused'), 'login');
  });
});

/** A spent mark that records what happened to it, in order, beside the sends. */
function recorder(canMark = true, canUnmark = true) {
  const events: string[] = [];
  const mark: SpentMark = {
    mark: () => {
      events.push('mark');
      return Promise.resolve(canMark);
    },
    unmark: () => {
      events.push('unmark');
      return Promise.resolve(canUnmark);
    },
  };
  const send = (result: GrantResult) => () => {
    events.push('send');
    return Promise.resolve(result);
  };
  return { events, mark, send };
}

describe('sending a refresh token', () => {
  it('marks it spent before sending, and keeps the mark once granted', async () => {
    const { events, mark, send } = recorder();
    const attempt = await sendRefresh(mark, send(grantNumber(1, 60_000)));
    assert.deepEqual(events, ['mark', 'send']);
    assert.equal(attempt?.result.kind, 'granted');
    assert.equal(attempt.unmarked, false);
  });

  it('keeps it spent when it was refused or sent without an answer', async () => {
    for (const result of [
      { kind: 'rejected', status: 401, code: 'FAILED' },
      { kind: 'failed', sent: true, reason: 'ECONNRESET after send' },
    ] as const) {
      const { events, mark, send } = recorder();
      const attempt = await sendRefresh(mark, send(result));
      assert.deepEqual(events, ['mark', 'send'], result.kind);
      assert.equal(attempt?.unmarked, false);
    }
  });

  it('lifts the mark only when the request provably never left', async () => {
    const { events, mark, send } = recorder();
    const attempt = await sendRefresh(mark, send({ kind: 'failed', sent: false, reason: 'ECONNREFUSED' }));
    assert.deepEqual(events, ['mark', 'send', 'unmark']);
    assert.equal(attempt?.unmarked, true);
  });

  it('says so when the mark could not be lifted (the record moved)', async () => {
    const { mark, send } = recorder(true, false);
    const attempt = await sendRefresh(mark, send({ kind: 'failed', sent: false, reason: 'ECONNREFUSED' }));
    assert.equal(attempt?.unmarked, false);
  });

  it('does not send a refresh token it could not mark spent', async () => {
    const { events, mark, send } = recorder(false);
    const attempt = await sendRefresh(mark, send(grantNumber(1, 60_000)));
    assert.equal(attempt, undefined);
    assert.deepEqual(events, ['mark']);
  });
});
