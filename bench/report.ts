import { cpus } from 'node:os';
import type { LatencyResult } from './open-loop.js';

export interface Headline {
  readonly sign_limit_per_s: number;
  readonly throughput_per_s: number;
  readonly throughput_per_core: number;
  readonly ratio_to_limit: number;
  readonly added_p99_ms_at_200: number;
  readonly rss_mb_load: number;
  readonly rss_growth_mb_soak: number;
  readonly errors: number;
}

export interface LatencyPair {
  readonly direct: LatencyResult;
  readonly sidecar: LatencyResult;
}

export type Row = readonly [string, string];

export const TARGETS = { ratio: 0.7, addedP99Ms: 1.5, rssLoadMb: 150, rssGrowthMb: 10 } as const;

const f = (n: number, digits = 0): string => (Number.isFinite(n) ? n.toFixed(digits) : 'n/a');

export function machine(): string {
  const model = cpus()[0]?.model ?? 'unknown CPU';
  return `${cpus().length} x ${model}, node ${process.version}, ${process.platform}`;
}

export function latencyRows(pairs: readonly LatencyPair[]): Row[] {
  return pairs.flatMap(({ direct: d, sidecar: s }) => [
    [`latency @${d.rate}/s direct   p50/p99/p99.9`, `${f(d.p50, 3)} / ${f(d.p99, 3)} / ${f(d.p999, 3)} ms`],
    [`latency @${s.rate}/s sidecar  p50/p99/p99.9`, `${f(s.p50, 3)} / ${f(s.p99, 3)} / ${f(s.p999, 3)} ms`],
    [`added   @${s.rate}/s          p50/p99/p99.9`, `${f(s.p50 - d.p50, 3)} / ${f(s.p99 - d.p99, 3)} / ${f(s.p999 - d.p999, 3)} ms`],
    [`  (generator send lag p99, in both)`, `${f(d.sendLagP99, 3)} / ${f(s.sendLagP99, 3)} ms`],
  ] as Row[]);
}

export function verdicts(h: Headline): Row[] {
  const mark = (ok: boolean): string => (ok ? 'ok' : 'MISSED');
  return [
    ['target: per-core >= 0.7 x limit', mark(h.ratio_to_limit >= TARGETS.ratio)],
    ['target: added p99 @200/s < 1.5 ms', mark(h.added_p99_ms_at_200 < TARGETS.addedP99Ms)],
    ['target: RSS under load < 150 MB', mark(h.rss_mb_load < TARGETS.rssLoadMb)],
    [`target: soak growth < ${TARGETS.rssGrowthMb} MB`, mark(h.rss_growth_mb_soak < TARGETS.rssGrowthMb)],
    ['target: zero errors and non-2xx', mark(h.errors === 0)],
  ];
}

export function targetsMet(h: Headline): boolean {
  return verdicts(h).every(([, v]) => v === 'ok');
}

export function renderTable(rows: readonly Row[]): string {
  const width = Math.max(...rows.map(([k]) => k.length));
  const line = `+${'-'.repeat(width + 2)}+${'-'.repeat(Math.max(...rows.map(([, v]) => v.length)) + 2)}+`;
  const valueWidth = line.length - width - 7;
  return [line, ...rows.map(([k, v]) => `| ${k.padEnd(width)} | ${v.padEnd(valueWidth)} |`), line].join('\n');
}

export { f as fmt };
