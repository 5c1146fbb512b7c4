// The run's report: summary.json (the figures) and report.html (a timeline: faults as bands, answers per second by
// class, latency percentiles), drawn with Vega-Lite and rendered to SVG here, so the page needs no script or
// network to show it.
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { View, parse } from 'vega';
import { compile, type TopLevelSpec } from 'vega-lite';
import type { CheckResult } from './checker.js';
import { FAULT_KINDS, type AnswerEvent, type FaultEvent, type HistoryEvent, type RunEvent } from './history.js';

/**
 * One color a fault kind, in the order of FAULT_KINDS (Tableau 20's, then a few more): named here, as the SVG is
 * drawn without a browser, and fixed per kind, so that a kind has the same color in every run's report.
 */
const FAULT_COLORS = [
  '#4e79a7',
  '#f28e2b',
  '#e15759',
  '#76b7b2',
  '#59a14f',
  '#edc948',
  '#b07aa1',
  '#ff9da7',
  '#9c755f',
  '#bab0ac',
  '#1f77b4',
  '#8c564b',
  '#17becf',
  '#d37295',
  '#a0cbe8',
  '#ffbe7d',
  '#8cd17d',
  '#b6992d',
  '#499894',
  '#86bcb6',
  '#fabfd2',
] as const satisfies readonly string[] & { length: (typeof FAULT_KINDS)['length'] };

export interface Summary {
  readonly seed: number | null;
  readonly duration_s: number | null;
  /** Where the run's parts ran (null: a history from before networks were recorded, all on loopback). */
  readonly network: 'namespaces' | 'loopback' | null;
  readonly operations: number;
  readonly ok: number;
  readonly fail: number;
  readonly info: number;
  readonly info_in_ledger: number;
  readonly attempts: number;
  readonly faults: Record<string, number>;
  readonly violations: string[];
  readonly logins: number;
  readonly logins_bound: number;
  readonly refreshes: number;
  readonly postbacks_delivered: number;
  readonly max_postback_delay_s: number;
  /** `redis-restart-empty` faults that wiped the data, and what each replica slot counted. */
  readonly wipes: number;
  readonly wipes_noticed: readonly number[];
  /** What the wipes explain (payments made twice, postbacks lost), listed in `explained_by_wipes`. */
  readonly wipe_duplicates: number;
  readonly postbacks_lost_to_wipes: number;
  readonly explained_by_wipes: string[];
  /** `redis-restart-snapshot` faults that did take the data back to the snapshot (see each one's detail). */
  readonly rollbacks: number;
  /** Per fault kind, what the callers and the application met while a fault of that kind was on. */
  readonly by_fault: Record<string, FaultFigures>;
}

/**
 * The answers given while faults of one kind were on (from each one's start to its end; a fault of another group may
 * have been on too), and the postbacks of transactions completed meanwhile.
 */
export interface FaultFigures {
  readonly faults: number;
  readonly answers: number;
  readonly ok: number;
  /** 503: refused, nothing sent (the caller sends the same key again). */
  readonly refused_503: number;
  readonly in_progress_409: number;
  /** `outcome_unknown` (502/504), and how many of those payments the gateway holds. */
  readonly outcome_unknown: number;
  readonly outcome_unknown_in_ledger: number;
  readonly no_answer: number;
  readonly postbacks: number;
  /** Of those, delivered more than 10 s after the transaction completed; and the longest, in seconds. */
  readonly postbacks_delayed: number;
  readonly max_postback_delay_s: number;
}

const DELAYED_POSTBACK_MS = 10_000;

/** FaultFigures for every kind that occurred. */
export function figuresByFault(history: readonly HistoryEvent[]): Record<string, FaultFigures> {
  const faults = history.filter((e): e is FaultEvent => e.type === 'fault');
  const answers = history.filter((e): e is AnswerEvent => e.type === 'ok' || e.type === 'fail' || e.type === 'info');
  const inLedger = new Set(history.flatMap((e) => (e.type === 'ledger' ? [e.invoice_no] : [])));
  const firstPostback = new Map<string, number>();
  for (const e of history)
    if (e.type === 'postback' && e.verified && !firstPostback.has(`${e.transaction_id}/${e.status}`))
      firstPostback.set(`${e.transaction_id}/${e.status}`, e.t);
  const completes = history.filter((e) => e.type === 'complete');
  const figures: Record<string, FaultFigures> = {};
  for (const kind of [...new Set(faults.map((f) => f.kind))]) {
    const windows = faults.filter((f) => f.kind === kind).map((f) => [f.start, f.end] as const);
    const during = (t: number): boolean => windows.some(([start, end]) => t >= start && t <= end);
    const met = answers.filter((a) => during(a.t));
    const unknown = met.filter((a) => a.code === 'sidecar.upstream.outcome_unknown');
    const delays = completes
      .filter((c) => during(c.t))
      .map((c) => (firstPostback.get(`${c.transaction_id}/${c.status}`) ?? Number.POSITIVE_INFINITY) - c.t);
    figures[kind] = {
      faults: windows.length,
      answers: met.length,
      ok: met.filter((a) => a.status >= 200 && a.status < 300).length,
      refused_503: met.filter((a) => a.status === 503).length,
      in_progress_409: met.filter((a) => a.status === 409).length,
      outcome_unknown: unknown.length,
      outcome_unknown_in_ledger: unknown.filter((a) => inLedger.has(a.invoice_no)).length,
      no_answer: met.filter((a) => a.status === 0).length,
      postbacks: delays.length,
      postbacks_delayed: delays.filter((ms) => ms > DELAYED_POSTBACK_MS).length,
      max_postback_delay_s: delays.length === 0 ? 0 : Math.round(Math.max(...delays) / 100) / 10,
    };
  }
  return figures;
}

export function summarize(history: readonly HistoryEvent[], result: CheckResult): Summary {
  const run = history.find((e): e is RunEvent => e.type === 'run');
  return {
    seed: run?.seed ?? null,
    duration_s: run?.duration_s ?? null,
    network: run?.network ?? null,
    operations: result.payments.total,
    ok: result.payments.ok,
    fail: result.payments.fail,
    info: result.payments.info,
    info_in_ledger: result.infoInLedger,
    attempts: result.attempts,
    faults: result.faults,
    violations: result.violations.map((v) => `${v.name}: ${v.detail}`),
    logins: result.logins.password,
    logins_bound: result.logins.bound,
    refreshes: result.logins.refresh,
    postbacks_delivered: result.postbacksDelivered,
    max_postback_delay_s: result.maxPostbackDelayS,
    wipes: result.wipes,
    wipes_noticed: result.wipesNoticed,
    wipe_duplicates: result.wipeDuplicates,
    postbacks_lost_to_wipes: result.postbacksLostToWipes,
    explained_by_wipes: result.explained.map((v) => `${v.name}: ${v.detail}`),
    rollbacks: history.filter((e) => e.type === 'fault' && e.kind === 'redis-restart-snapshot' && e.rolled_back).length,
    by_fault: figuresByFault(history),
  };
}

export async function writeReport(dir: string, history: readonly HistoryEvent[], summary: Summary): Promise<void> {
  writeFileSync(join(dir, 'summary.json'), `${JSON.stringify(summary, null, 2)}\n`);
  const svg = await timelineSvg(history);
  writeFileSync(join(dir, 'report.html'), page(summary, svg));
}

/** The timeline as one SVG: three charts over the same seconds of the run. */
export async function timelineSvg(history: readonly HistoryEvent[]): Promise<string> {
  const faults = history
    .filter((e): e is FaultEvent => e.type === 'fault')
    // An instant fault (a password rotation) still gets a visible band.
    .map((f) => ({
      kind: f.kind,
      start: f.start / 1000,
      end: Math.max(f.end, f.start + 500) / 1000,
      detail: f.detail ?? '',
    }));
  const answers = history.filter((e): e is AnswerEvent => e.type === 'ok' || e.type === 'fail' || e.type === 'info');
  const perSecond = new Map<string, { second: number; next: number; class: string; answers: number }>();
  for (const a of answers) {
    const second = Math.floor(a.t / 1000);
    const key = `${second}/${a.type}`;
    const row = perSecond.get(key) ?? { second, next: second + 1, class: a.type, answers: 0 };
    row.answers++;
    perSecond.set(key, row);
  }
  const latency = latencyWindows(answers, 5);
  // One time axis for the three charts: from the start to the last thing that happened.
  const lastSecond = Math.ceil(history.reduce((last, e) => Math.max(last, e.t), 0) / 1000);
  const width = 900;
  const xScale = { title: 'seconds since start' };
  const spec: TopLevelSpec = {
    $schema: 'https://vega.github.io/schema/vega-lite/v6.json',
    config: { font: 'sans-serif', view: { stroke: '#ccc' } },
    // Each chart its own colors (fault kinds, answer classes, percentiles); a shared scale would merge them.
    resolve: { scale: { color: 'independent' } },
    vconcat: [
      {
        title: 'Faults',
        width,
        height: Math.max(60, 18 * new Set(faults.map((f) => f.kind)).size),
        data: { values: faults },
        mark: { type: 'bar', cornerRadius: 2 },
        encoding: {
          x: { field: 'start', type: 'quantitative', axis: xScale, scale: { domain: [0, lastSecond] } },
          x2: { field: 'end' },
          y: { field: 'kind', type: 'nominal', title: null },
          color: {
            field: 'kind',
            type: 'nominal',
            legend: null,
            scale: { domain: [...FAULT_KINDS], range: [...FAULT_COLORS] },
          },
          tooltip: [{ field: 'kind' }, { field: 'detail' }],
        },
      },
      {
        title: 'Answers per second',
        width,
        height: 160,
        data: { values: [...perSecond.values()] },
        mark: { type: 'bar' },
        encoding: {
          x: {
            field: 'second',
            type: 'quantitative',
            bin: { binned: true, step: 1 },
            axis: xScale,
            scale: { domain: [0, lastSecond] },
          },
          x2: { field: 'next' },
          y: { field: 'answers', type: 'quantitative', stack: 'zero', title: 'answers/s' },
          color: {
            field: 'class',
            type: 'nominal',
            scale: { domain: ['ok', 'fail', 'info'], range: ['#4c9a2a', '#d62728', '#ff9f1c'] },
          },
        },
      },
      {
        title: 'Latency of an attempt (5 s windows)',
        width,
        height: 160,
        data: { values: latency },
        mark: { type: 'line', point: false },
        encoding: {
          x: { field: 'second', type: 'quantitative', axis: xScale, scale: { domain: [0, lastSecond] } },
          y: { field: 'ms', type: 'quantitative', scale: { type: 'log' }, title: 'ms' },
          color: {
            field: 'percentile',
            type: 'nominal',
            scale: { domain: ['p50', 'p95', 'p99'], range: ['#1f77b4', '#ff7f0e', '#9467bd'] },
          },
        },
      },
    ],
  };
  const view = new View(parse(compile(spec).spec), { renderer: 'none' });
  const svg = await view.toSVG();
  view.finalize();
  return svg;
}

function latencyWindows(
  answers: readonly AnswerEvent[],
  seconds: number,
): { second: number; percentile: string; ms: number }[] {
  const windows = new Map<number, number[]>();
  for (const a of answers) {
    const start = Math.floor(a.t / 1000 / seconds) * seconds;
    windows.set(start, [...(windows.get(start) ?? []), a.latency_ms]);
  }
  return [...windows].flatMap(([second, samples]) => {
    const sorted = samples.sort((x, y) => x - y);
    const at = (q: number): number => sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))] ?? 0;
    return [
      { second, percentile: 'p50', ms: at(0.5) },
      { second, percentile: 'p95', ms: at(0.95) },
      { second, percentile: 'p99', ms: at(0.99) },
    ];
  });
}

function page(summary: Summary, svg: string): string {
  const rows = [
    ['seed', summary.seed],
    ['duration', `${summary.duration_s ?? '?'} s`],
    ['network', summary.network ?? 'loopback'],
    ['payments', `${summary.operations} (ok ${summary.ok}, fail ${summary.fail}, unknown ${summary.info})`],
    ['attempts', summary.attempts],
    [
      'faults',
      Object.entries(summary.faults)
        .map(([kind, n]) => `${kind} ${n}`)
        .join(', '),
    ],
    ['password logins', `${summary.logins} (bound ${summary.logins_bound}), refreshes ${summary.refreshes}`],
    ['postbacks delivered', summary.postbacks_delivered],
    ['worst postback delay', `${summary.max_postback_delay_s} s`],
    [
      'Redis wipes',
      `${summary.wipes} (counted by each replica: ${summary.wipes_noticed.join(', ') || '?'}); explained by them: ` +
        `${summary.wipe_duplicates} payments made twice, ${summary.postbacks_lost_to_wipes} postbacks lost`,
    ],
    ['Redis rollbacks', `${summary.rollbacks} (to an older snapshot: redis-restart-snapshot)`],
  ];
  const violations =
    summary.violations.length === 0
      ? '<p class="ok">No violations.</p>'
      : `<ul class="bad">${summary.violations.map((v) => `<li>${escapeHtml(v)}</li>`).join('')}</ul>`;
  const explained =
    summary.explained_by_wipes.length === 0
      ? ''
      : `<h2>Explained by a wipe</h2>\n<ul>${summary.explained_by_wipes.map((v) => `<li>${escapeHtml(v)}</li>`).join('')}</ul>`;
  return `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>Chaos run, seed ${escapeHtml(String(summary.seed))}</title>
<style>
body { font-family: sans-serif; margin: 2em; color: #222; }
table { border-collapse: collapse; margin-bottom: 1em; }
th, td { text-align: left; padding: 0.2em 1em 0.2em 0; }
.ok { color: #2a7a2a; font-weight: bold; }
.bad { color: #b00; }
</style>
</head>
<body>
<h1>Chaos run, seed ${escapeHtml(String(summary.seed))}</h1>
<table>${rows.map(([k, v]) => `<tr><th>${escapeHtml(String(k))}</th><td>${escapeHtml(String(v))}</td></tr>`).join('\n')}</table>
<h2>Violations</h2>
${violations}
${explained}
<h2>Timeline</h2>
<figure id="timeline">${svg}</figure>
</body>
</html>
`;
}

function escapeHtml(text: string): string {
  return text.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
}
