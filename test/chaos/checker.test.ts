// The chaos checker is only worth something if it can fail: a clean history passes, and each doctored copy of it
// (the faults a broken sidecar would leave in a real history) is caught and named.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { check, REAPPEND_BOUND_MS, type ViolationName } from '../../chaos/checker.js';
import type { HistoryEvent } from '../../chaos/history.js';

/** Three payments: one ok and completed (its postback delivered), one certainly refused, one of unknown outcome. */
function cleanHistory(): HistoryEvent[] {
  const attempt = { process: 1, replica: 0 };
  return [
    { t: 0, type: 'run', seed: 7, duration_s: 60, replicas: 3, callers: 16 },
    { t: 100, type: 'invoke', op: 'deposit', invoice_no: 'inv-1', key: 'k1', ...attempt },
    { t: 150, type: 'info', invoice_no: 'inv-1', key: 'k1', status: 0, latency_ms: 50, ...attempt },
    { t: 200, type: 'invoke', op: 'deposit', invoice_no: 'inv-1', key: 'k1', ...attempt, replica: 2 },
    {
      t: 260,
      type: 'ok',
      invoice_no: 'inv-1',
      key: 'k1',
      status: 200,
      transaction_id: 'tx-1',
      latency_ms: 60,
      ...attempt,
    },
    { t: 300, type: 'complete', transaction_id: 'tx-1', status: 'SUCCESS' },
    { t: 400, type: 'invoke', op: 'withdrawal', invoice_no: 'inv-2', key: 'k2', ...attempt },
    {
      t: 420,
      type: 'fail',
      invoice_no: 'inv-2',
      key: 'k2',
      status: 503,
      code: 'sidecar.idempotency.unavailable',
      latency_ms: 20,
      ...attempt,
    },
    { t: 500, type: 'invoke', op: 'deposit', invoice_no: 'inv-3', key: 'k3', ...attempt },
    {
      t: 5600,
      type: 'info',
      invoice_no: 'inv-3',
      key: 'k3',
      status: 504,
      code: 'sidecar.upstream.outcome_unknown',
      latency_ms: 5100,
      ...attempt,
    },
    { t: 1000, type: 'fault', kind: 'redis-primary-kill', start: 900, end: 8000 },
    {
      t: 2000,
      type: 'postback',
      transaction_id: 'tx-1',
      status: 'SUCCESS',
      postback_id: 'pb_1',
      attempt: 1,
      verified: true,
    },
    {
      t: 2100,
      type: 'postback',
      transaction_id: 'tx-1',
      status: 'SUCCESS',
      postback_id: 'pb_1',
      attempt: 2,
      verified: true,
    },
    { t: 9000, type: 'invoke', op: 'deposit', invoice_no: 'final-1', key: 'kf', ...attempt, final_round: true },
    {
      t: 9100,
      type: 'ok',
      invoice_no: 'final-1',
      key: 'kf',
      status: 200,
      transaction_id: 'tx-f',
      latency_ms: 100,
      ...attempt,
      final_round: true,
    },
    { t: 9200, type: 'complete', transaction_id: 'tx-f', status: 'SUCCESS' },
    {
      t: 9400,
      type: 'postback',
      transaction_id: 'tx-f',
      status: 'SUCCESS',
      postback_id: 'pb_f',
      attempt: 1,
      verified: true,
    },
    {
      t: 9500,
      type: 'liveness',
      healed_at: 8000,
      replicas_ready_at: 8500,
      final_round_done_at: 9100,
      inbox_drained_at: 9600,
    },
    { t: 9600, type: 'logins', password: 2, refresh: 3 },
    { t: 9700, type: 'ledger', transaction_id: 'tx-1', invoice_no: 'inv-1', status: 'SUCCESS' },
    { t: 9700, type: 'ledger', transaction_id: 'tx-3', invoice_no: 'inv-3', status: 'PENDING' },
    { t: 9700, type: 'ledger', transaction_id: 'tx-f', invoice_no: 'final-1', status: 'SUCCESS' },
  ] as HistoryEvent[];
}

const names = (history: readonly HistoryEvent[]): ViolationName[] => [
  ...new Set(check(history).violations.map((v) => v.name)),
];

describe('chaos checker', () => {
  it('finds nothing wrong in a clean history, and counts what it saw', () => {
    const result = check(cleanHistory());
    assert.deepEqual(result.violations, []);
    assert.deepEqual(result.payments, { total: 4, ok: 2, fail: 1, info: 1 });
    assert.equal(result.infoInLedger, 1, 'the unknown payment was in fact made');
    assert.deepEqual(result.faults, { 'redis-primary-kill': 1 });
    assert.deepEqual(result.logins, { password: 2, refresh: 3, bound: 2 });
    assert.equal(result.postbacksDelivered, 3);
    assert.equal(result.maxPostbackDelayS, 1.7);
  });

  it('names a payment made twice: a ledger entry copied under a new transaction_id', () => {
    const history = cleanHistory();
    history.push({ t: 9700, type: 'ledger', transaction_id: 'tx-1-bis', invoice_no: 'inv-1', status: 'PENDING' });
    assert.deepEqual(names(history), ['duplicate-payment']);
  });

  it('names an ok the gateway does not hold, and an ok naming another transaction', () => {
    const missing = cleanHistory().filter((e) => !(e.type === 'ledger' && e.transaction_id === 'tx-1'));
    assert.ok(names(missing).includes('ok-not-in-ledger'));
    const other = cleanHistory().map((e) =>
      e.type === 'ledger' && e.transaction_id === 'tx-1' ? { ...e, transaction_id: 'tx-other' } : e,
    );
    assert.ok(names(other).includes('ok-wrong-transaction'));
  });

  it('names a payment every attempt of which certainly failed, yet recorded', () => {
    const history = cleanHistory();
    history.push({ t: 9700, type: 'ledger', transaction_id: 'tx-2', invoice_no: 'inv-2', status: 'PENDING' });
    assert.deepEqual(names(history), ['failed-payment-in-ledger']);
  });

  it('names a postback dropped: a final status that never reached the application', () => {
    const history = cleanHistory().filter((e) => !(e.type === 'postback' && e.transaction_id === 'tx-1'));
    assert.deepEqual(names(history), ['postback-missing']);
  });

  it('names two statuses swapped between transactions, and a postback the ledger does not hold', () => {
    const history = cleanHistory().map((e) =>
      e.type === 'ledger' && e.transaction_id === 'tx-f' ? { ...e, status: 'FAILED' as const } : e,
    );
    // tx-f's postback says SUCCESS, the ledger FAILED; and the other way round for tx-1.
    const swapped = history.map((e) =>
      e.type === 'postback' && e.transaction_id === 'tx-1' ? { ...e, status: 'FAILED' } : e,
    );
    const found = names(swapped);
    assert.ok(found.includes('postback-status-mismatch'), found.join());
    const stray = [
      ...cleanHistory(),
      {
        t: 9000,
        type: 'postback',
        transaction_id: 'tx-404',
        status: 'SUCCESS',
        postback_id: 'pb_x',
        attempt: 1,
        verified: true,
      },
    ] as HistoryEvent[];
    assert.deepEqual(names(stray), ['postback-not-in-ledger']);
  });

  it('names statuses out of order, and a postback whose signature did not verify', () => {
    const history = [
      ...cleanHistory(),
      {
        t: 2200,
        type: 'postback',
        transaction_id: 'tx-1',
        status: 'FAILED',
        postback_id: 'pb_2',
        attempt: 1,
        verified: true,
      },
      {
        t: 2300,
        type: 'postback',
        transaction_id: 'tx-1',
        status: 'SUCCESS',
        postback_id: 'pb_3',
        attempt: 1,
        verified: false,
      },
    ] as HistoryEvent[];
    assert.deepEqual(names(history).sort(), [
      'postback-out-of-order',
      'postback-status-mismatch',
      'postback-unverified',
    ]);
  });

  it('names a 401 or a signature code seen by a caller', () => {
    const attempt = { process: 3, replica: 1, invoice_no: 'inv-1', key: 'k1', latency_ms: 5 };
    const history = [
      ...cleanHistory(),
      { t: 180, type: 'fail', status: 401, code: 'FAILED', ...attempt },
      { t: 190, type: 'fail', status: 400, code: 'signature.timestamp.expired', ...attempt },
    ] as HistoryEvent[];
    assert.deepEqual(names(history).sort(), ['caller-saw-401', 'caller-saw-signature-error']);
  });

  it('names password logins beyond what the faults explain', () => {
    const history = cleanHistory().map((e) => (e.type === 'logins' ? { ...e, password: 3 } : e));
    assert.deepEqual(names(history), ['logins-unexplained']);
  });

  it('names each liveness condition missed, and a run that never got there', () => {
    const late = cleanHistory().map((e) =>
      e.type === 'liveness'
        ? { ...e, replicas_ready_at: 8000 + 61_000, inbox_drained_at: null, final_round_done_at: 8000 + 70_000 }
        : e,
    );
    assert.deepEqual(names(late).sort(), ['liveness-final-round', 'liveness-inbox', 'liveness-replicas']);
    const refused = cleanHistory().map((e) =>
      e.type === 'ok' && e.final_round === true ? { ...e, type: 'fail' as const, status: 503 } : e,
    );
    assert.ok(names(refused).includes('liveness-final-round'));
    assert.deepEqual(names(cleanHistory().filter((e) => e.type !== 'liveness')), ['liveness-unmeasured']);
  });

  describe('a Redis restarted empty: what it costs is counted, what it does not explain stays flagged', () => {
    /** inv-1's first attempt (100 ms, no answer) and its keyed retry (200 ms) straddle a wipe at 150-180 ms. */
    const wipe = {
      t: 190,
      type: 'fault',
      kind: 'redis-restart-empty',
      start: 150,
      end: 180,
      detail: 'port 1',
      wiped: true,
      noticed_at: 2150,
    } as const;
    const copied = { t: 9700, type: 'ledger', transaction_id: 'tx-1-bis', invoice_no: 'inv-1', status: 'PENDING' };

    it('counts a payment made twice across a wipe, and lists it, without flagging it', () => {
      const history = [...cleanHistory(), wipe, copied] as HistoryEvent[];
      const result = check(history);
      assert.deepEqual(result.violations, []);
      assert.equal(result.wipes, 1);
      assert.equal(result.wipeDuplicates, 1);
      assert.deepEqual(
        result.explained.map((e) => e.name),
        ['duplicate-payment'],
      );
      assert.match(result.explained[0]?.detail ?? '', /inv-1 recorded 2 times: tx-1, tx-1-bis/);
      assert.equal(result.logins.bound, 3, 'a wipe may cost one login');
    });

    it('flags the same payment made twice when no wipe, or a wipe before the first attempt, explains it', () => {
      assert.deepEqual(names([...cleanHistory(), copied] as HistoryEvent[]), ['duplicate-payment']);
      const before = { ...wipe, start: 20, end: 60 };
      assert.deepEqual(names([...cleanHistory(), before, copied] as HistoryEvent[]), ['duplicate-payment']);
      const noWipe = { ...wipe, wiped: false };
      assert.deepEqual(names([...cleanHistory(), noWipe, copied] as HistoryEvent[]), ['duplicate-payment']);
    });

    it('counts a postback lost when a replica was stopped between its start and its appending again; else flags it', () => {
      const dropped = cleanHistory().filter((e) => !(e.type === 'postback' && e.transaction_id === 'tx-1'));
      // tx-1 completed at 300 ms; a wipe at 1000-1200 ms.
      const later = { ...wipe, start: 1000, end: 1200, noticed_at: 3000 };
      const killed = { t: 5000, type: 'fault', kind: 'replica-kill', start: 800, end: 5000, detail: 'replica 1' };
      const explained = check([...dropped, later, killed] as HistoryEvent[]);
      assert.deepEqual(explained.violations, []);
      assert.equal(explained.postbacksLostToWipes, 1);
      assert.deepEqual(names([...dropped, later] as HistoryEvent[]), ['postback-missing'], 'every replica lived');
      const killedBefore = { ...killed, start: 200 };
      assert.deepEqual(
        names([...dropped, later, killedBefore] as HistoryEvent[]),
        ['postback-missing'],
        'the replica died before the postback was sent',
      );
      // Killed after the wipe, before it could append again (an append to a Redis still coming back is tried again
      // at the next lookup): explained. Killed once every replica has appended again: flagged.
      const killedAfter = { ...killed, start: 1200 + REAPPEND_BOUND_MS };
      assert.deepEqual(check([...dropped, later, killedAfter] as HistoryEvent[]).violations, []);
      const killedLate = { ...killed, start: 1201 + REAPPEND_BOUND_MS };
      assert.deepEqual(
        names([...dropped, later, killedLate] as HistoryEvent[]),
        ['postback-missing'],
        'appended again',
      );
    });

    it('flags a replica that exited on its own (killed by memory, crashed), not one the nemesis stopped', () => {
      const crash = { t: 5000, type: 'crash', replica: 1, code: null, signal: 'SIGABRT' };
      assert.deepEqual(names([...cleanHistory(), crash] as HistoryEvent[]), ['replica-crashed']);
      assert.match(check([...cleanHistory(), crash] as HistoryEvent[]).violations[0]!.detail, /replica 1 .*SIGABRT/);
    });

    it('flags a wipe no replica noticed, and reads what each replica counted', () => {
      const unnoticed = { ...wipe, noticed_at: null };
      assert.deepEqual(names([...cleanHistory(), unnoticed] as HistoryEvent[]), ['wipe-unnoticed']);
      const counted = { t: 9650, type: 'wipes_noticed', per_replica: [1, 1, 0] };
      assert.deepEqual(check([...cleanHistory(), wipe, counted] as HistoryEvent[]).wipesNoticed, [1, 1, 0]);
    });
  });
});
