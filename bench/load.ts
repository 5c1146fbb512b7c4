// The measurements: the raw signing limit, closed-loop saturation (autocannon) and open-loop latency.
import { constants, sign, type KeyObject } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import autocannon from 'autocannon';
import { Pool } from 'undici';
import type { Child } from './processes.js';
import { cpuSeconds, rssMb } from './processes.js';
import { PAYLOAD, ROUTE, type Target } from './stack.js';

/** RSA-2048 PKCS#1 v1.5 SHA-256 signatures per CPU second, synchronously on one core, of a sidecar-sized input. */
export function signLimit(key: KeyObject, seconds: number): number {
  const input = Buffer.from(
    `POST.http://127.0.0.1:40000${ROUTE}.1700000000.${'n'.repeat(32)}.${Buffer.from(PAYLOAD).toString('base64')}`,
  );
  const options = { key, padding: constants.RSA_PKCS1_PADDING };
  for (let i = 0; i < 50; i++) sign('sha256', input, options); // warm-up
  const cpu0 = process.cpuUsage();
  const until = performance.now() + seconds * 1000;
  let count = 0;
  for (; performance.now() < until; count++) sign('sha256', input, options);
  const cpu = process.cpuUsage(cpu0);
  return count / ((cpu.user + cpu.system) / 1e6);
}

/**
 * How late a 1 ms timer of an idle Node process fires, at p99 (ms): the host's own scheduling noise. A latency
 * figure near or below it cannot be told apart from the host; added_p99 targets of about a millisecond need it
 * well under a millisecond.
 */
export async function timerLatenessP99(seconds: number): Promise<number> {
  const lateness: number[] = [];
  const until = performance.now() + seconds * 1000;
  while (performance.now() < until) {
    const due = performance.now() + 1;
    await sleep(1);
    lateness.push(performance.now() - due);
  }
  return percentile(lateness, 0.99);
}

/** The q-quantile (0 < q <= 1) of the samples, nearest rank; sorts them in place. */
export function percentile(samples: number[], q: number): number {
  samples.sort((a, b) => a - b);
  return samples[Math.ceil(q * samples.length) - 1] ?? Number.NaN;
}

/** Samples a process's RSS (MB) every `everyMs` until stopped. */
export function watchRss(pid: number, everyMs: number): { readonly samples: number[]; stop(): void } {
  const samples = [rssMb(pid)];
  const timer = setInterval(() => samples.push(rssMb(pid)), everyMs);
  return { samples, stop: () => clearInterval(timer) };
}

export interface Saturation {
  readonly perSecond: number; // 2xx answers
  readonly cores: number; // CPU the process used meanwhile (user + system, all threads)
  readonly perCore: number;
  readonly rssMaxMb: number;
  readonly errors: number; // transport errors, timeouts and non-2xx answers
}

/** What one stretch of the closed loop counted. */
interface Stretch {
  readonly answers: number; // 2xx
  readonly wallSeconds: number;
  readonly cpuSeconds: number;
  readonly rssMaxMb: number;
  readonly errors: number;
}

/**
 * `rounds` rounds in which each of `count` contestants takes one turn, in an order that rotates from round to
 * round. The host's speed drifts from one minute to the next; in turns it drifts under every contestant alike, so
 * comparing their pooled figures compares them rather than the minutes they ran in.
 */
async function inTurns(count: number, rounds: number, turn: (index: number) => Promise<void>): Promise<void> {
  for (let round = 0; round < rounds; round++)
    for (let offset = 0; offset < count; offset++) await turn((round + offset) % count);
}

/**
 * Closed loop on several processes in turns (after a warm-up of `warmupSeconds` each, whose errors and memory
 * count), each getting `seconds` in all; one Saturation per process, in the order given.
 */
export async function saturateInTurns(
  procs: readonly Child[],
  options: {
    readonly warmupSeconds: number;
    readonly seconds: number;
    readonly rounds: number;
    readonly connections: number;
  },
): Promise<Saturation[]> {
  const warmups: Stretch[] = [];
  for (const proc of procs) warmups.push(await closedLoop(proc, options.warmupSeconds, options.connections));
  const stretches: Stretch[][] = procs.map(() => []);
  await inTurns(procs.length, options.rounds, async (index) => {
    const proc = procs[index];
    if (proc) stretches[index]?.push(await closedLoop(proc, options.seconds / options.rounds, options.connections));
  });
  return stretches.map((measured, index) => {
    const total = (field: 'answers' | 'wallSeconds' | 'cpuSeconds'): number =>
      measured.reduce((sum, stretch) => sum + stretch[field], 0);
    const all = [...measured, ...(warmups[index] ? [warmups[index]] : [])];
    const cores = total('cpuSeconds') / total('wallSeconds');
    const perSecond = total('answers') / total('wallSeconds');
    return {
      perSecond,
      cores,
      perCore: perSecond / cores,
      rssMaxMb: Math.max(...all.map((stretch) => stretch.rssMaxMb)),
      errors: all.reduce((sum, stretch) => sum + stretch.errors, 0),
    };
  });
}

/** Closed loop: `connections` clients, each sending its next request as soon as it has an answer. */
async function closedLoop(proc: Child, seconds: number, connections: number): Promise<Stretch> {
  const rss = watchRss(proc.pid, 250);
  const cpu0 = cpuSeconds(proc.pid);
  const start = performance.now();
  try {
    const result = await autocannon({
      url: `${proc.url}${ROUTE}`,
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: PAYLOAD,
      connections,
      duration: seconds,
      timeout: 10,
    });
    return {
      answers: result['2xx'],
      wallSeconds: (performance.now() - start) / 1000,
      cpuSeconds: cpuSeconds(proc.pid) - cpu0,
      rssMaxMb: Math.max(...rss.samples),
      errors: result.errors + result.non2xx,
    };
  } finally {
    rss.stop();
  }
}

export interface Latency {
  readonly p50: number;
  readonly p99: number;
  readonly errors: number;
}

/**
 * Open loop: request i is due at start + i/rate whatever happened to earlier ones, and its latency runs from that
 * due time, so a stall counts against every request it delayed (no coordinated omission). The generator's own
 * timer lateness is included, alike for every target.
 */
export async function openLoop(target: Target, rate: number, seconds: number): Promise<Latency> {
  return (await interleavedOpenLoop({ target }, rate, seconds, 1)).target;
}

/** The open loop over several targets in turns, each getting `seconds` in all, its samples pooled over the rounds. */
export async function interleavedOpenLoop<Name extends string>(
  targets: Record<Name, Target>,
  rate: number,
  seconds: number,
  rounds: number,
): Promise<Record<Name, Latency>> {
  const names = Object.keys(targets) as Name[];
  const runs = names.map((name) => ({
    name,
    target: targets[name],
    pool: new Pool(targets[name].url, { connections: 64, headersTimeout: 10_000, bodyTimeout: 10_000 }),
    latencies: [] as number[],
    errors: 0,
  }));
  try {
    await inTurns(runs.length, rounds, async (index) => {
      const run = runs[index];
      if (run) run.errors += await paced(run.pool, run.target, rate, seconds / rounds, run.latencies);
    });
  } finally {
    await Promise.all(runs.map((run) => run.pool.close()));
  }
  const result = {} as Record<Name, Latency>;
  for (const run of runs)
    result[run.name] = {
      p50: percentile(run.latencies, 0.5),
      p99: percentile(run.latencies, 0.99),
      errors: run.errors,
    };
  return result;
}

/** One stretch of the open loop on `pool`; pushes each request's latency (ms) and returns the failures. */
async function paced(pool: Pool, target: Target, rate: number, seconds: number, latencies: number[]): Promise<number> {
  let errors = 0;
  const sent: Promise<void>[] = [];
  const send = async (due: number): Promise<void> => {
    try {
      const headers = target.perRequest ? { ...target.headers, ...target.perRequest() } : target.headers;
      const res = await pool.request({ method: 'POST', path: ROUTE, headers, body: target.body });
      await res.body.dump();
      if (res.statusCode < 200 || res.statusCode > 299) errors++;
    } catch {
      errors++;
    }
    latencies.push(performance.now() - due);
  };
  const start = performance.now();
  for (let i = 0; i < Math.max(1, Math.round(rate * seconds)); i++) {
    const due = start + (i * 1000) / rate;
    if (due > performance.now()) await sleep(due - performance.now());
    sent.push(send(due));
  }
  await Promise.all(sent);
  return errors;
}
