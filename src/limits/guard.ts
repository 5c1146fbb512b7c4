import { setTimeout as delay } from 'node:timers/promises';
import { errorName, sidecarErrors, type SidecarError } from '../errors.js';
import type { LimitMetrics, WindowUse } from '../observability/limit-metrics.js';
import type { Logger } from '../observability/log.js';
import type { StateStore, WriteOptions } from '../state/state-store.js';
import { formatMinorUnits, limitInMinorUnits } from './amount.js';
import { paymentOf, type Payment } from './payment.js';
import { NO_LIMITS, type LimitRule, type LimitRules, type LimitWindow } from './rules.js';
import {
  decodeUsage,
  encodeUsage,
  NO_USAGE,
  useOf,
  usageTtlMs,
  withoutPayment,
  withPayment,
  type Reserved,
  type Usage,
} from './usage.js';

export interface LimitGuardOptions {
  readonly store: StateStore;
  /** Wall clock (Unix ms): windows are shared across replicas. */
  readonly now: () => number;
  readonly log: Logger;
  readonly metrics: LimitMetrics;
}

/** What a payment holds of its rules' windows until it is known whether the gateway took it. */
export interface Reservation {
  readonly held: readonly { readonly rule: LimitRule; readonly reserved: readonly Reserved[] }[];
}

/** One window's use, for `signing-sidecar limits` and the use ratio. */
export interface WindowFigures {
  readonly rule: string;
  readonly mode: LimitRule['mode'];
  readonly window: string;
  /** The currency counted; undefined for a count of payments. */
  readonly currency: string | undefined;
  /** Decimal text in the currency (or a count), as are `max` and `left`. */
  readonly used: string;
  readonly max: string;
  readonly left: string;
  readonly ratio: number;
}

/**
 * A reservation is counted only once the configured replicas hold it: a failover must not forget what left. Pinned:
 * the memory store never evicts a rule's record to make room.
 */
const WRITE: WriteOptions = { acknowledged: true, pinned: true, refusedBlocks: true };
/**
 * Payments of one rule waiting for this replica's earlier writes of its record: past this many (a store slowed down),
 * a payment is refused `unavailable` at once rather than queued for longer than a caller waits.
 */
const MAX_QUEUED = 256;
/** Compare-and-set rounds lost to other replicas' writes before the payment is refused as `unavailable`. */
const ROUNDS = 16;
/** The most a lost round waits before the next: replicas racing for one rule spread out. */
const ROUND_JITTER_MS = 5;

/** The store key of a rule's record. */
const limitKeyOf = (rule: string): string => `limit:${rule}`;

/**
 * The money guardrails (docs/limits.md): before a payment on a covered route is signed, each rule covering it
 * checks the payment against its most per payment and its windows, and reserves it in every window in one
 * compare-and-set of the rule's record (the fleet's record on Redis). A reservation is given back when nothing
 * reached the gateway or the gateway refused the payment; otherwise it stays: a payment whose outcome is unknown
 * counts as sent. One replica writes a rule's record one payment at a time; replicas race by compare-and-set.
 */
export class LimitGuard {
  private limits: LimitRules = NO_LIMITS;
  /** Per rule: the unreadable record last logged. */
  private readonly unreadable = new Map<string, string>();
  /** Per rule: the tail of this replica's writes of its record, and how many wait in it. */
  private readonly queues = new Map<string, { tail: Promise<unknown>; waiting: number }>();

  constructor(private readonly options: LimitGuardOptions) {
    options.metrics.readUseFrom(async () => busiest(await this.figures()));
  }

  /** The rules in use from now on (a reload of SIDECAR_LIMITS_FILE). */
  use(limits: LimitRules): void {
    this.limits = limits;
    this.options.metrics.rulesInUse(limits.rules);
  }

  /**
   * Checks and reserves a payment on `route` against every rule covering it. Throws sidecar.limit.exceeded (403),
   * amount_invalid (400) or unavailable (503), having reserved nothing; undefined when no window reserved anything.
   * `end`: the request's; once it has ended (its deadline, shutdown), a write still queued is not made.
   */
  async reserve(
    route: string,
    payload: unknown,
    requestId: string,
    end: { readonly ended: boolean } = { ended: false },
  ): Promise<Reservation | undefined> {
    const { rules, exponentOf } = this.limits;
    const covering = rules.filter((rule) => rule.route === route);
    if (covering.length === 0) return undefined;
    const held: { rule: LimitRule; reserved: readonly Reserved[] }[] = [];
    try {
      for (const rule of covering) {
        const payment = this.paymentFor(rule, payload, exponentOf, requestId);
        if (payment === undefined) continue;
        if (rule.maxAmount !== undefined && payment.amount > limitInMinorUnits(rule.maxAmount, payment.exponent))
          this.breach(rule, 'payment', requestId);
        if (rule.windows.length === 0) continue;
        // A store slowed down: payments are refused at once (enforce) rather than queued past what callers wait.
        if ((this.queues.get(rule.name)?.waiting ?? 0) >= MAX_QUEUED) {
          this.unchecked(rule, requestId, new Error('too many payments waiting for the store'));
          continue;
        }
        const reserved = await this.serially(rule.name, async () =>
          end.ended
            ? this.unchecked(rule, requestId, new Error('the request ended'))
            : this.reserveWindows(rule, payment, requestId),
        );
        if (reserved !== undefined) held.push({ rule, reserved });
      }
    } catch (err) {
      await this.release({ held }, requestId);
      throw err;
    }
    return held.length === 0 ? undefined : { held };
  }

  /** Gives a reservation back: nothing reached the gateway, or it refused the payment. Never throws. */
  async release(reservation: Reservation, requestId: string): Promise<void> {
    for (const { rule, reserved } of reservation.held) {
      try {
        await this.serially(rule.name, () => this.releaseWindows(rule, reserved));
      } catch (err) {
        // Kept as if sent: the window is fuller than it should be until the payment ages out of it, never emptier.
        this.options.log.warn(
          { event: 'limit.release_failed', rule: rule.name, requestId, error: errorName(err) },
          'a payment that was not sent still counts against its limit until it leaves the window',
        );
      }
    }
  }

  /** Every window of every rule as the store holds it now (per currency for a rule without one). */
  async figures(): Promise<WindowFigures[]> {
    const { rules, exponentOf } = this.limits;
    const nowMs = this.options.now();
    const figures: WindowFigures[] = [];
    for (const rule of rules) {
      if (rule.windows.length === 0) continue;
      const usage = await this.usageOf(rule);
      const currencies = rule.currency !== undefined ? [rule.currency] : currenciesIn(usage);
      for (const window of rule.windows) {
        if (window.maxCount !== undefined) {
          figures.push(windowFigures(rule, window, undefined, 0, useOf(usage, window, '', nowMs)));
          continue;
        }
        for (const currency of currencies) {
          const exponent = exponentOf(currency);
          if (exponent !== undefined)
            figures.push(windowFigures(rule, window, currency, exponent, useOf(usage, window, currency, nowMs)));
        }
      }
    }
    return figures;
  }

  private async reserveWindows(
    rule: LimitRule,
    payment: Payment,
    requestId: string,
  ): Promise<readonly Reserved[] | undefined> {
    const key = limitKeyOf(rule.name);
    for (let round = 0; round < ROUNDS; round++) {
      const read = await this.tryStore(rule, requestId, () => this.options.store.read(key));
      if (read === undefined) return undefined;
      // A record its MAC refuses (forged, or a replica under another MAC key): never taken for no use, which would
      // reset the fleet's count. Refused like an unreachable store until it is deleted (the store counted it).
      if (read.found === 'refused') return this.unchecked(rule, requestId, new Error('the limit record was refused'));
      const current = read.found === 'value' ? read.value : undefined;
      const usage = current === undefined ? NO_USAGE : this.decode(rule, current);
      if (usage === undefined) return this.unchecked(rule, requestId, new Error('the limit record is unreadable'));
      const nowMs = this.options.now();
      const over = rule.windows.filter((window) => !fits(usage, window, payment, nowMs));
      // Enforced: refused before anything is written. Reported: reserved all the same, and told once written.
      if (over.length > 0 && rule.mode === 'enforce') this.breach(rule, over[0]?.label ?? '', requestId);
      const next = withPayment(usage, rule, payment.currency, payment.amount, nowMs);
      const written = await this.tryStore(rule, requestId, () =>
        this.options.store.compareAndSet(key, current, encodeUsage(next.usage), usageTtlMs(next.usage), WRITE),
      );
      if (written === undefined) return undefined;
      if (written) {
        for (const window of over) this.breach(rule, window.label, requestId);
        return next.reserved;
      }
      await delay(Math.random() * ROUND_JITTER_MS);
    }
    return this.unchecked(rule, requestId, new Error('the record changed under every round'));
  }

  private async releaseWindows(rule: LimitRule, reserved: readonly Reserved[]): Promise<void> {
    const key = limitKeyOf(rule.name);
    for (let round = 0; round < ROUNDS; round++) {
      const read = await this.options.store.read(key);
      if (read.found !== 'value') return;
      const usage = this.decode(rule, read.value);
      if (usage === undefined) throw new Error('the limit record is unreadable');
      const next = withoutPayment(usage, reserved);
      if (await this.options.store.compareAndSet(key, read.value, encodeUsage(next), usageTtlMs(next), WRITE)) return;
      await delay(Math.random() * ROUND_JITTER_MS);
    }
    throw new Error('the record changed under every round');
  }

  /** A store call; on failure, enforce refuses (503) and report lets the payment through unchecked (undefined). */
  private async tryStore<T>(rule: LimitRule, requestId: string, call: () => Promise<T>): Promise<T | undefined> {
    try {
      return await call();
    } catch (err) {
      return this.unchecked(rule, requestId, err);
    }
  }

  private unchecked(rule: LimitRule, requestId: string, cause: unknown): undefined {
    if (rule.mode === 'enforce') throw sidecarErrors.limitUnavailable(cause);
    this.options.log.warn(
      { event: 'limit.unchecked', rule: rule.name, requestId, error: errorName(cause) },
      'a report-mode limit could not be checked (state store away or busy); the payment was sent uncounted',
    );
    return undefined;
  }

  /** A payment over a limit: refused (enforce: throws 403) or reported (report: counted and logged, sent). */
  private breach(rule: LimitRule, window: string, requestId: string): void {
    this.options.metrics.refused(rule.name, rule.mode);
    const enforced = rule.mode === 'enforce';
    this.options.log.warn(
      { event: enforced ? 'limit.refused' : 'limit.would_refuse', rule: rule.name, window, requestId },
      enforced ? 'a payment over a limit was refused; nothing was sent' : 'a payment over a report-mode limit was sent',
    );
    if (enforced) throw sidecarErrors.limitExceeded(rule.name, window) satisfies SidecarError;
  }

  /** The record's use; undefined, and logged, for a record this version cannot read. */
  private decode(rule: LimitRule, text: string): Usage | undefined {
    const usage = decodeUsage(text);
    // Said once per value: every payment of the rule reads it until it is deleted.
    if (usage === undefined && this.unreadable.get(rule.name) !== text) {
      this.unreadable.set(rule.name, text);
      this.options.log.error(
        { event: 'limit.record_unreadable', rule: rule.name },
        'a limit record is unreadable: its payments are refused (enforce) until the key is deleted (docs/limits.md)',
      );
    }
    return usage;
  }

  /** The record's use now; throws when it cannot be read, refused by its MAC or unreadable. */
  private async usageOf(rule: LimitRule): Promise<Usage> {
    const read = await this.options.store.read(limitKeyOf(rule.name));
    if (read.found === 'none') return NO_USAGE;
    const usage = read.found === 'value' ? this.decode(rule, read.value) : undefined;
    if (usage === undefined) throw new Error(`the record of limit rule ${rule.name} is refused or unreadable`);
    return usage;
  }

  /**
   * The payment as `rule` counts it, or undefined when the rule does not count this one. A rule that counts payments
   * only needs no amount. Report mode never refuses: an amount it cannot count is sent uncounted, and said.
   */
  private paymentFor(
    rule: LimitRule,
    fields: unknown,
    exponentOf: (currency: string) => number | undefined,
    requestId: string,
  ): Payment | undefined {
    try {
      return paymentOf(rule, fields, exponentOf);
    } catch (err) {
      if (rule.mode === 'enforce') throw err;
      return this.unchecked(rule, requestId, err);
    }
  }

  /** Runs `work` after this replica's earlier writes of the rule's record: replicas race, requests of one do not. */
  private serially<T>(rule: string, work: () => Promise<T>): Promise<T> {
    const queue = this.queues.get(rule) ?? { tail: Promise.resolve(), waiting: 0 };
    queue.waiting += 1;
    const run = queue.tail.then(work, work).finally(() => (queue.waiting -= 1));
    queue.tail = run.then(
      () => undefined,
      () => undefined,
    );
    this.queues.set(rule, queue);
    const tail = queue.tail;
    void tail.then(() => {
      if (queue.tail === tail && queue.waiting === 0) this.queues.delete(rule);
    });
    return run;
  }
}

function fits(usage: Usage, window: LimitWindow, payment: Payment, nowMs: number): boolean {
  const used = useOf(usage, window, payment.currency, nowMs);
  if (window.maxCount !== undefined) return used + 1n <= BigInt(window.maxCount);
  return used + payment.amount <= limitInMinorUnits(window.maxTotal ?? '0', payment.exponent);
}

function windowFigures(
  rule: LimitRule,
  window: LimitWindow,
  currency: string | undefined,
  exponent: number,
  used: bigint,
): WindowFigures {
  const max =
    window.maxCount !== undefined ? BigInt(window.maxCount) : limitInMinorUnits(window.maxTotal ?? '0', exponent);
  const left = max > used ? max - used : 0n;
  return {
    rule: rule.name,
    mode: rule.mode,
    window: window.label,
    currency,
    used: formatMinorUnits(used, exponent),
    max: formatMinorUnits(max, exponent),
    left: formatMinorUnits(left, exponent),
    ratio: max === 0n ? 1 : Number((used * 1_000_000n) / max) / 1_000_000,
  };
}

/** The currencies a rule's record counts amounts of (a rule without a currency counts each apart). */
function currenciesIn(usage: Usage): string[] {
  const found = new Set<string>();
  for (const name of usage.keys()) if (name.startsWith('amount:')) found.add(name.slice(7, name.indexOf('/')));
  return [...found].sort();
}

/** One ratio per rule and window: the busiest currency's, for a rule counting several. */
function busiest(figures: readonly WindowFigures[]): WindowUse[] {
  const ratios = new Map<string, WindowUse>();
  for (const { rule, window, ratio } of figures) {
    const key = `${rule}\n${window}`;
    if ((ratios.get(key)?.ratio ?? -1) < ratio) ratios.set(key, { rule, window, ratio });
  }
  return [...ratios.values()];
}
