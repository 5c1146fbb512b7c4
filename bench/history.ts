// bench/history.tsv: one row per full run of `npm run bench`, appended by run.ts after its verdicts, so that a run
// can be read against the runs before it (docs/performance.md, "History"). Tab-separated, a header line first; each
// target's paired figure and its verdict (PASS, FAIL, or - where the run does not judge).
import { execFileSync } from 'node:child_process';
import { appendFileSync, existsSync } from 'node:fs';
import { cpus } from 'node:os';
import { fileURLToPath } from 'node:url';

/** The targets, by the names of `paired_rounds` where they have rounds. */
export type Target =
  'cpu' | 'p50' | 'p99' | 'alloc' | 'idle' | 'load' | 'overload' | 'soak' | 'errors' | 'store' | 'key';

const COLUMNS = [
  'date',
  'commit',
  'node',
  'machine',
  'load_average',
  'sign_limit_per_s',
  'rounds',
  'state_store',
  'throughput_per_core',
  'rss_mb_load_max',
  'cpu',
  'cpu_verdict',
  'p50',
  'p50_verdict',
  'p99',
  'p99_verdict',
  'alloc',
  'alloc_verdict',
  'idle',
  'idle_verdict',
  'load',
  'load_verdict',
  'overload',
  'overload_verdict',
  'soak',
  'soak_verdict',
  'errors',
  'errors_verdict',
  'store',
  'store_verdict',
  'key',
  'key_bound',
  'key_verdict',
  'note',
] as const;
type Column = (typeof COLUMNS)[number];
/** A run's figures and verdicts; the date, the commit and the machine are the bench's own. */
export type Row = Partial<Record<Exclude<Column, 'date' | 'commit' | 'machine'>, string | number>>;

const ROOT = fileURLToPath(new URL('..', import.meta.url));
const FILE = fileURLToPath(new URL('history.tsv', import.meta.url));

/** The commit the run measured, `-dirty` with uncommitted changes; empty outside a git checkout. */
function commitMeasured(): string {
  try {
    return execFileSync('git', ['describe', '--always', '--dirty', '--exclude=*'], {
      cwd: ROOT,
      encoding: 'utf8',
      stdio: ['ignore', 'pipe', 'ignore'],
    }).trim();
  } catch {
    return '';
  }
}

/** `2 x AMD EPYC 7B13`: figures differ by machine more than by anything the code does. */
function machine(): string {
  const all = cpus();
  return `${all.length} x ${all[0]?.model ?? 'unknown'}`;
}

/** Appends one run (columns left out stay empty), after the header when the file is new. */
export function appendHistory(row: Row): void {
  const full: Partial<Record<Column, string | number>> = {
    date: new Date().toISOString().slice(0, 10),
    commit: commitMeasured(),
    machine: machine(),
    ...row,
  };
  const cell = (value: string | number | undefined): string =>
    value === undefined || (typeof value === 'number' && Number.isNaN(value))
      ? ''
      : String(value).replace(/\s+/g, ' ').trim();
  if (!existsSync(FILE)) appendFileSync(FILE, `${COLUMNS.join('\t')}\n`);
  appendFileSync(FILE, `${COLUMNS.map((column) => cell(full[column])).join('\t')}\n`);
}
