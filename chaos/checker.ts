// The checker: a pure function of the history. It knows nothing of the run but what history.jsonl says, so it can
// be run alone (`npm run chaos -- --check FILE`) and fed doctored histories by its tests.
import type {
  AnswerEvent,
  CompleteEvent,
  CrashEvent,
  FaultEvent,
  HistoryEvent,
  InvokeEvent,
  LedgerEvent,
  LivenessEvent,
  LoginsEvent,
  Outcome,
  PostbackEvent,
  WipesNoticedEvent,
} from './history.js';

/** After the last fault heals: every replica ready, the final round answered 200, the inbox empty. */
export const LIVENESS_BOUND_MS = 60_000;
/**
 * After a wipe's end, by when every replica has appended again what it held: its connection back (a connect attempt
 * timing out, 2 s, and the reconnect backoff, 1 s and up to 0.1 s of jitter), one epoch check (2 s), and a failed
 * append's retry (within 1 s) with its command, with most of a second to spare.
 */
export const REAPPEND_BOUND_MS = 2_000 + 1_000 + 2_000 + 1_000 + 1_000;

export type ViolationName =
  | 'duplicate-payment'
  | 'ok-not-in-ledger'
  | 'ok-wrong-transaction'
  | 'failed-payment-in-ledger'
  | 'postback-missing'
  | 'postback-not-in-ledger'
  | 'postback-status-mismatch'
  | 'postback-out-of-order'
  | 'postback-unverified'
  | 'caller-saw-401'
  | 'caller-saw-signature-error'
  | 'logins-unexplained'
  | 'liveness-replicas'
  | 'liveness-final-round'
  | 'liveness-inbox'
  | 'liveness-unmeasured'
  | 'wipe-unnoticed'
  | 'replica-crashed';

export interface Violation {
  readonly name: ViolationName;
  readonly detail: string;
}

export interface CheckResult {
  readonly violations: Violation[];
  /** Payments (one Idempotency-Key each) by what their callers learned. */
  readonly payments: { readonly total: number; readonly ok: number; readonly fail: number; readonly info: number };
  /** Payments of unknown outcome that the gateway does hold (the rest of `info` it does not). */
  readonly infoInLedger: number;
  readonly attempts: number;
  readonly faults: Record<string, number>;
  readonly logins: { readonly password: number; readonly refresh: number; readonly bound: number };
  readonly postbacksDelivered: number;
  /** From the workload's completion of a transaction to the application's first copy of its postback. */
  readonly maxPostbackDelayS: number;
  /** `redis-restart-empty` faults that did wipe the data (the Sentinels did not fail over to a replica holding it). */
  readonly wipes: number;
  /** The wipes each replica slot counted by the end (its metric over the processes it ran); empty if not recorded. */
  readonly wipesNoticed: readonly number[];
  /** Payments made twice that a wipe explains (listed in `explained`), and postbacks a wipe explains losing. */
  readonly wipeDuplicates: number;
  readonly postbacksLostToWipes: number;
  /** What a wipe explains, each named as the violation it would otherwise be: reported, never hidden. */
  readonly explained: Violation[];
}

/** At most this many of one violation are listed in full; the rest are counted in one more line. */
const LISTED_PER_NAME = 20;

export function check(history: readonly HistoryEvent[]): CheckResult {
  const violations: Violation[] = [];
  const flag = (name: ViolationName, detail: string): void => void violations.push({ name, detail });

  const invokes = history.filter((e): e is InvokeEvent => e.type === 'invoke');
  const answers = history.filter((e): e is AnswerEvent => e.type === 'ok' || e.type === 'fail' || e.type === 'info');
  const ledger = history.filter((e): e is LedgerEvent => e.type === 'ledger');
  const postbacks = history.filter((e): e is PostbackEvent => e.type === 'postback');
  const completes = history.filter((e): e is CompleteEvent => e.type === 'complete');
  const faults = history.filter((e): e is FaultEvent => e.type === 'fault');
  // A Redis restarted empty loses the idempotency keys and the postback inbox: what it explains is
  // reported apart, and only what it explains.
  const wipes = faults.filter((f) => f.kind === 'redis-restart-empty' && f.wiped !== false);
  const explained: Violation[] = [];
  const explain = (name: ViolationName, detail: string): void => void explained.push({ name, detail });
  for (const wipe of wipes) {
    if (wipe.noticed_at === null || wipe.noticed_at === undefined)
      flag('wipe-unnoticed', `the wipe at ${wipe.start} ms (${wipe.detail ?? ''}): no replica counted it`);
  }
  // A replica that dies on its own (out of memory under a flood, a crash) stops payments: whatever else held.
  for (const crash of history.filter((e): e is CrashEvent => e.type === 'crash')) {
    const how = crash.signal ?? `exit code ${String(crash.code)}`;
    flag('replica-crashed', `replica ${crash.replica} exited on its own at ${crash.t} ms (${how})`);
  }

  // No payment twice: an invoice_no is one payment, whatever happened to its attempts. A wipe forgets the key, so
  // an attempt sent before it ended and a retry sent after it started can both be made: counted, not flagged.
  const ledgerByInvoice = groupBy(ledger, (e) => e.invoice_no);
  const invokesByInvoice = groupBy(invokes, (e) => e.invoice_no);
  for (const [invoice, entries] of ledgerByInvoice) {
    if (entries.length > 1) {
      const detail = `${invoice} recorded ${entries.length} times: ${entries.map((e) => e.transaction_id).join(', ')}`;
      const sent = (invokesByInvoice.get(invoice) ?? []).map((e) => e.t);
      const wipe = wipes.find((w) => sent.some((a) => a <= w.end && sent.some((b) => b > a && b >= w.start)));
      if (wipe === undefined) flag('duplicate-payment', detail);
      else explain('duplicate-payment', `${detail}; its key forgotten by the wipe at ${wipe.start} ms`);
    }
  }

  // What each payment's callers learned, against what the gateway holds.
  const outcomes = { ok: 0, fail: 0, info: 0 };
  let infoInLedger = 0;
  const answersByInvoice = groupBy(answers, (e) => e.invoice_no);
  const invoices = new Set([...invokes.map((e) => e.invoice_no), ...answersByInvoice.keys()]);
  for (const invoice of invoices) {
    const told = answersByInvoice.get(invoice) ?? [];
    const held = ledgerByInvoice.get(invoice) ?? [];
    const outcome = paymentOutcome(told);
    outcomes[outcome]++;
    if (outcome === 'ok') {
      for (const ok of told.filter((e) => e.type === 'ok')) {
        if (held.length === 0)
          flag('ok-not-in-ledger', `${invoice}: answered 200 (${ok.transaction_id ?? '?'}), not in the ledger`);
        else if (!held.some((e) => e.transaction_id === ok.transaction_id)) {
          flag(
            'ok-wrong-transaction',
            `${invoice}: answered ${ok.transaction_id ?? '?'}, the ledger holds ${held[0]?.transaction_id}`,
          );
        }
      }
    } else if (outcome === 'fail' && held.length > 0) {
      flag(
        'failed-payment-in-ledger',
        `${invoice}: every attempt certainly failed, yet ${held[0]?.transaction_id} is recorded`,
      );
    } else if (outcome === 'info' && held.length > 0) infoInLedger++;
  }

  // No caller ever sees the gateway refuse the sidecar's token or signature.
  for (const answer of answers) {
    if (answer.status === 401)
      flag(
        'caller-saw-401',
        `${answer.invoice_no} on replica ${answer.replica} at ${answer.t} ms: ${answer.code ?? ''}`,
      );
    else if (answer.code?.startsWith('signature.') === true) {
      flag('caller-saw-signature-error', `${answer.invoice_no} at ${answer.t} ms: ${answer.code}`);
    }
  }

  // Postbacks: every final status reaches the application, in order, and nothing the ledger does not hold.
  const ledgerById = new Map(ledger.map((e) => [e.transaction_id, e]));
  const postbacksById = groupBy(postbacks, (e) => e.transaction_id);
  for (const postback of postbacks.filter((e) => !e.verified)) {
    flag('postback-unverified', `${postback.postback_id} (${postback.transaction_id}): signature did not verify`);
  }
  for (const [id, received] of postbacksById) {
    const held = ledgerById.get(id);
    if (held === undefined) {
      flag('postback-not-in-ledger', `${id}: ${received.length} postback(s), no such transaction in the ledger`);
      continue;
    }
    const statuses = distinctInOrder(received.filter((e) => e.verified).map((e) => e.status));
    if (statuses.some((s) => s !== held.status)) {
      flag(
        'postback-status-mismatch',
        `${id}: the application got ${statuses.join(' then ')}, the ledger holds ${held.status}`,
      );
    }
    // The gateway sends PENDING's successor once: a final status followed by another one is out of order.
    if (statuses.length > 1) flag('postback-out-of-order', `${id}: ${statuses.join(' then ')}`);
  }
  // After a wipe the replicas append again what they accepted and have not seen delivered; a replica stopped
  // between the postback's start and its appending again takes its copy with it (docs/fleet.md: lost only if that
  // replica dies and Redis is wiped too). A replica notices a wipe within its epoch check (2 s) and appends at once;
  // an append that fails (Redis still coming back) is tried again within a second: REAPPEND_BOUND_MS after the
  // wipe's end. The history does not say which replica accepted a postback, so any replica stopped then explains
  // it.
  const completedAt = new Map(completes.map((c) => [c.transaction_id, c.t]));
  const stops = faults.filter((f) => f.kind === 'replica-kill' || f.kind === 'rolling-restart');
  for (const held of ledger) {
    if (held.status === 'PENDING') continue;
    const received = (postbacksById.get(held.transaction_id) ?? []).filter((e) => e.verified);
    if (!received.some((e) => e.status === held.status)) {
      const detail = `${held.transaction_id} (${held.invoice_no}): ${held.status} never reached the application`;
      const sentAt = completedAt.get(held.transaction_id);
      const wipe =
        sentAt === undefined
          ? undefined
          : wipes.find(
              (w) =>
                sentAt <= w.end &&
                stops.some((k) =>
                  k.kind === 'replica-kill'
                    ? k.start >= sentAt && k.start <= w.end + REAPPEND_BOUND_MS
                    : k.end >= sentAt && k.start <= w.end + REAPPEND_BOUND_MS,
                ),
            );
      if (wipe === undefined) flag('postback-missing', detail);
      else explain('postback-missing', `${detail}; lost by the wipe at ${wipe.start} ms and a replica stopped`);
    }
  }

  // Logins: one for the fleet's first token, and one more at most for each fault that can take the fleet's token
  // record away (a Redis failover may lose its last write; a pause may hide it from every replica at once).
  const loginsEvent = history.find((e): e is LoginsEvent => e.type === 'logins');
  const redisFaults = faults.filter(
    (f) => f.kind === 'redis-primary-kill' || f.kind === 'redis-pause' || f.kind === 'redis-restart-empty',
  ).length;
  const bound = 1 + redisFaults;
  const logins = { password: loginsEvent?.password ?? 0, refresh: loginsEvent?.refresh ?? 0, bound };
  if (logins.password > bound) {
    flag(
      'logins-unexplained',
      `${logins.password} password logins, at most ${bound} explained (1 + ${redisFaults} Redis faults)`,
    );
  }

  checkLiveness(
    history.find((e): e is LivenessEvent => e.type === 'liveness'),
    answers,
    invokes,
    flag,
  );

  const firstPostback = new Map<string, number>();
  for (const p of postbacks)
    if (p.verified && !firstPostback.has(p.transaction_id)) firstPostback.set(p.transaction_id, p.t);
  let maxDelayMs = 0;
  for (const c of completes) {
    const at = firstPostback.get(c.transaction_id);
    if (at !== undefined) maxDelayMs = Math.max(maxDelayMs, at - c.t);
  }

  return {
    violations: capped(violations),
    payments: { total: invoices.size, ...outcomes },
    infoInLedger,
    attempts: invokes.length,
    faults: Object.fromEntries([...groupBy(faults, (f) => f.kind)].map(([kind, list]) => [kind, list.length])),
    logins,
    postbacksDelivered: postbacks.filter((e) => e.verified).length,
    maxPostbackDelayS: Math.round(maxDelayMs / 100) / 10,
    wipes: wipes.length,
    wipesNoticed: history.find((e): e is WipesNoticedEvent => e.type === 'wipes_noticed')?.per_replica ?? [],
    wipeDuplicates: explained.filter((e) => e.name === 'duplicate-payment').length,
    postbacksLostToWipes: explained.filter((e) => e.name === 'postback-missing').length,
    explained,
  };
}

/** ok if any attempt was answered ok; fail only if every attempt certainly failed; else unknown. */
function paymentOutcome(told: readonly AnswerEvent[]): Outcome {
  if (told.some((e) => e.type === 'ok')) return 'ok';
  if (told.length > 0 && told.every((e) => e.type === 'fail')) return 'fail';
  return 'info';
}

function checkLiveness(
  liveness: LivenessEvent | undefined,
  answers: readonly AnswerEvent[],
  invokes: readonly InvokeEvent[],
  flag: (name: ViolationName, detail: string) => void,
): void {
  if (liveness === undefined) {
    flag('liveness-unmeasured', 'the history has no liveness record: the run did not reach its end');
    return;
  }
  const late = (at: number | null): boolean => at === null || at - liveness.healed_at > LIVENESS_BOUND_MS;
  const after = (at: number | null): string =>
    at === null ? 'never' : `${((at - liveness.healed_at) / 1000).toFixed(1)} s`;
  if (late(liveness.replicas_ready_at))
    flag('liveness-replicas', `every replica ready: ${after(liveness.replicas_ready_at)} after the last fault healed`);
  if (late(liveness.inbox_drained_at))
    flag('liveness-inbox', `postback inbox empty: ${after(liveness.inbox_drained_at)} after the last fault healed`);
  const finalInvoices = new Set(invokes.filter((e) => e.final_round === true).map((e) => e.invoice_no));
  const finalOk = new Set(answers.filter((e) => e.final_round === true && e.type === 'ok').map((e) => e.invoice_no));
  const notOk = [...finalInvoices].filter((invoice) => !finalOk.has(invoice));
  if (finalInvoices.size === 0 || notOk.length > 0 || late(liveness.final_round_done_at)) {
    const what =
      finalInvoices.size === 0 ? 'no final round was made' : `${notOk.length} of ${finalInvoices.size} without 200`;
    flag('liveness-final-round', `${what}; done ${after(liveness.final_round_done_at)} after the last fault healed`);
  }
}

function capped(violations: readonly Violation[]): Violation[] {
  const byName = groupBy(violations, (v) => v.name);
  return [...byName].flatMap(([name, list]) =>
    list.length <= LISTED_PER_NAME
      ? list
      : [...list.slice(0, LISTED_PER_NAME), { name, detail: `and ${list.length - LISTED_PER_NAME} more` }],
  );
}

function groupBy<T, K>(items: readonly T[], key: (item: T) => K): Map<K, T[]> {
  const groups = new Map<K, T[]>();
  for (const item of items) {
    const k = key(item);
    const list = groups.get(k);
    if (list === undefined) groups.set(k, [item]);
    else list.push(item);
  }
  return groups;
}

function distinctInOrder(values: readonly string[]): string[] {
  return values.filter((value, index) => index === 0 || values[index - 1] !== value);
}
