// What a rule has let through, as one record per rule in the state store (`limit:<rule>`): for each currency (and
// for the count of payments) a series of buckets, one per step of time, each the sum of the payments reserved in it.
//
// A rolling window of period P sums the buckets of the last ceil(P / step) steps, the current one and any later one
// (a replica whose clock runs ahead writes those): a payment stays in it for between P and P plus one step. So the
// sidecar may refuse up to a step early, never too late: the gateway never receives more than the cap over any
// stretch of P. Steps come from a fixed ladder (1 s, 1 min, 1 h, 1 d), the smallest with at most MAX_BUCKETS buckets
// in the period: a 1 h window counts in minutes, a 24 h one in hours; windows of one step share their buckets, so a
// period changed in the rules file keeps what was counted. A bucket is dropped by its age alone, past what any window
// of its step can count (and a margin for clocks apart): replicas whose rules differ, during a rollout of the file,
// never drop each other's counts.
import { CURRENCY_CODE, MAX_PERIOD_MS, type LimitRule, type LimitWindow } from './rules.js';

/** `amount:<currency>/<step>` or `count/<step>` (seriesOf). */
const SERIES_NAME = new RegExp(`^(amount:${CURRENCY_CODE.source.slice(1, -1)}|count)/[1-9][0-9]*$`);

const STEPS_MS = [1_000, 60_000, 3_600_000] as const;
const LONGEST_STEP_MS = 86_400_000;
const MAX_BUCKETS = 200;
/** How far apart the replicas' clocks may be: buckets are kept this much longer than a window can count. */
const CLOCK_MARGIN_MS = 5_000;

/** The bucket width of a window's period. */
function stepOf(periodMs: number): number {
  return STEPS_MS.find((step) => periodMs / step <= MAX_BUCKETS) ?? LONGEST_STEP_MS;
}

/** A series' name: the payments' count, or one currency's amounts; and its step. */
function seriesOf(window: LimitWindow, currency: string): string {
  return `${window.maxCount === undefined ? `amount:${currency}` : 'count'}/${stepOf(window.periodMs)}`;
}

/** Bucket index -> sum (minor units, or payments), per series. */
export type Usage = ReadonlyMap<string, ReadonlyMap<number, bigint>>;

export const NO_USAGE: Usage = new Map();

/** What one payment added: where, so that a release takes exactly it back. */
export interface Reserved {
  readonly series: string;
  readonly bucket: number;
  readonly value: bigint;
}

/** The record's text: `{"v":1,"series":{"amount:USD/60000":[[index,"minor"],...]}}`, values as decimal strings. */
export function encodeUsage(usage: Usage): string {
  const series: Record<string, [number, string][]> = {};
  for (const [name, buckets] of usage)
    series[name] = [...buckets].sort(([a], [b]) => a - b).map(([index, sum]) => [index, sum.toString()]);
  return JSON.stringify({ v: 1, series });
}

/**
 * A record as written by encodeUsage; undefined for anything else (a sealed record of another version, or with the MAC
 * off, one written by anyone): never taken for no use, which would reset the fleet's count.
 */
export function decodeUsage(text: string): Usage | undefined {
  let parsed: { v?: unknown; series?: unknown };
  try {
    parsed = JSON.parse(text) as { v?: unknown; series?: unknown };
  } catch {
    return undefined;
  }
  if (typeof parsed !== 'object' || parsed === null) return undefined;
  if (parsed.v !== 1 || typeof parsed.series !== 'object' || parsed.series === null) return undefined;
  const usage = new Map<string, Map<number, bigint>>();
  for (const [name, rows] of Object.entries(parsed.series as Record<string, unknown>)) {
    if (!Array.isArray(rows) || !SERIES_NAME.test(name)) return undefined;
    const buckets = new Map<number, bigint>();
    for (const row of rows as unknown[]) {
      if (!Array.isArray(row) || !Number.isSafeInteger(row[0]) || typeof row[1] !== 'string') return undefined;
      if (!/^[0-9]{1,40}$/.test(row[1])) return undefined;
      buckets.set(row[0] as number, BigInt(row[1]));
    }
    usage.set(name, buckets);
  }
  return usage;
}

/** The window's sum at `nowMs`, for one currency (ignored by a count window). */
export function useOf(usage: Usage, window: LimitWindow, currency: string, nowMs: number): bigint {
  const step = stepOf(window.periodMs);
  const buckets = usage.get(seriesOf(window, currency));
  if (buckets === undefined) return 0n;
  const current = Math.floor(nowMs / step);
  const first = current - Math.ceil(window.periodMs / step);
  let sum = 0n;
  // Later buckets too: written by a replica whose clock is ahead of this one's.
  for (const [index, value] of buckets) if (index >= first) sum += value;
  return sum;
}

/**
 * The usage with one payment of `amount` added to each of the rule's windows at `nowMs` (one bucket per series,
 * however many windows share it), and buckets no window of the rule still counts dropped.
 */
export function withPayment(
  usage: Usage,
  rule: LimitRule,
  currency: string,
  amount: bigint,
  nowMs: number,
): { readonly usage: Usage; readonly reserved: readonly Reserved[] } {
  const next = pruned(usage, nowMs);
  const reserved: Reserved[] = [];
  for (const window of rule.windows) {
    const series = seriesOf(window, currency);
    if (reserved.some((r) => r.series === series)) continue;
    const bucket = Math.floor(nowMs / stepOf(window.periodMs));
    const value = window.maxCount === undefined ? amount : 1n;
    const buckets = new Map(next.get(series));
    buckets.set(bucket, (buckets.get(bucket) ?? 0n) + value);
    next.set(series, buckets);
    reserved.push({ series, bucket, value });
  }
  return { usage: next, reserved };
}

/** The usage with a payment's reservations taken back (those whose bucket is still kept). */
export function withoutPayment(usage: Usage, reserved: readonly Reserved[]): Usage {
  const next = new Map(usage);
  for (const { series, bucket, value } of reserved) {
    const held = next.get(series)?.get(bucket);
    if (held === undefined) continue;
    const buckets = new Map(next.get(series));
    const left = held - value;
    if (left > 0n) buckets.set(bucket, left);
    else buckets.delete(bucket);
    next.set(series, buckets);
  }
  return next;
}

/** How long a record must outlive its last write: as long as its oldest-kept series keeps a bucket. */
export function usageTtlMs(usage: Usage): number {
  return Math.max(60_000, ...[...usage.keys()].map((name) => keptMsOf(stepOfSeries(name))));
}

/** How long a series of `step` keeps a bucket: the longest window of that step, a step, the clocks' margin. */
function keptMsOf(step: number): number {
  return Math.min(MAX_BUCKETS * step, MAX_PERIOD_MS) + step + CLOCK_MARGIN_MS;
}

/** A series' step, from its name (made by seriesOf, or checked against SERIES_NAME by decodeUsage). */
const stepOfSeries = (name: string): number => Number(name.slice(name.lastIndexOf('/') + 1));

/** A copy without the buckets too old for any window of their step to count, whatever the rules. */
function pruned(usage: Usage, nowMs: number): Map<string, ReadonlyMap<number, bigint>> {
  const next = new Map<string, ReadonlyMap<number, bigint>>();
  for (const [name, buckets] of usage) {
    const step = stepOfSeries(name);
    const first = Math.floor((nowMs - keptMsOf(step)) / step);
    const kept = new Map([...buckets].filter(([index]) => index >= first));
    if (kept.size > 0) next.set(name, kept);
  }
  return next;
}
