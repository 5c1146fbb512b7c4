// The measurements: the signing limit, closed-loop saturation (autocannon), open-loop latency and RSS.
import { constants, sign, type KeyObject } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import autocannon from 'autocannon';
import { Pool } from 'undici';
import { cpuSeconds, rssMb, type Child } from './processes.js';
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

/** The q-quantile (0 < q <= 1) of the samples, nearest rank; sorts them in place. */
export function percentile(samples: number[], q: number): number {
  samples.sort((a, b) => a - b);
  return samples[Math.ceil(q * samples.length) - 1] ?? Number.NaN;
}

/**
 * Samples a process's RSS (MB) every `everyMs` until stopped; `anon`: its anonymous part at each sample (without the
 * pages of mapped files, the node binary's code among them).
 */
export function watchRss(
  pid: number,
  everyMs: number,
): { readonly samples: number[]; readonly anon: number[]; stop(): void } {
  const [samples, anon] = [[rssMb(pid)], [rssMb(pid, 'RssAnon')]];
  const timer = setInterval(() => {
    samples.push(rssMb(pid));
    anon.push(rssMb(pid, 'RssAnon'));
  }, everyMs);
  return { samples, anon, stop: () => clearInterval(timer) };
}

// The one way the bench compares: `rounds` rounds of one turn each, in an order that rotates. The host's speed
// drifts within minutes; in turns it drifts under every contestant alike.
async function inTurns(count: number, rounds: number, turn: (index: number) => Promise<void>): Promise<void> {
  for (let round = 0; round < rounds; round++)
    for (let offset = 0; offset < count; offset++) await turn((round + offset) % count);
}

/**
 * 2xx answers per second and per CPU second (user + system, all threads), peak RSS and its anonymous part at that
 * peak, of one round.
 */
export type SaturationRound = Record<'perSecond' | 'perCore' | 'rssMaxMb' | 'anonAtMaxMb', number>;
/** The rounds pooled, each round's own figures, and the errors (with the warm-up's). */
export type Saturation = Omit<SaturationRound, 'anonAtMaxMb'> & {
  readonly errors: number;
  readonly rounds: readonly SaturationRound[];
};
const REQUEST = {
  method: 'POST',
  headers: { 'content-type': 'application/json' },
  body: PAYLOAD,
  timeout: 10,
} as const;

/**
 * Closed loop (`connections` clients, each sending its next request as soon as it has an answer) on several
 * processes in turns, after a warm-up of `warmupSeconds` each; each gets `seconds` in all.
 */
export async function saturate(
  procs: readonly Child[],
  options: { warmupSeconds: number; seconds: number; rounds: number; connections: number },
): Promise<Saturation[]> {
  const sums = procs.map(() => ({
    answers: 0,
    wall: 0,
    cpu: 0,
    rssMaxMb: 0,
    errors: 0,
    rounds: [] as SaturationRound[],
  }));
  const stretch = async (index: number, seconds: number, counted: boolean): Promise<void> => {
    const [proc, sum] = [procs[index], sums[index]];
    if (!proc || !sum) return;
    const rss = watchRss(proc.pid, 250);
    const [cpu0, start] = [cpuSeconds(proc.pid), performance.now()];
    const loop = autocannon({ ...REQUEST, url: proc.url + ROUTE, connections: options.connections, duration: seconds });
    const result = await Promise.resolve(loop).finally(() => rss.stop());
    const rssMaxMb = Math.max(...rss.samples);
    const anonAtMaxMb = rss.anon[rss.samples.indexOf(rssMaxMb)] ?? Number.NaN;
    if (counted) {
      const [wall, cpu] = [(performance.now() - start) / 1000, cpuSeconds(proc.pid) - cpu0];
      sum.answers += result['2xx'];
      sum.wall += wall;
      sum.cpu += cpu;
      sum.rounds.push({ perSecond: result['2xx'] / wall, perCore: result['2xx'] / cpu, rssMaxMb, anonAtMaxMb });
    }
    sum.rssMaxMb = Math.max(sum.rssMaxMb, rssMaxMb);
    sum.errors += result.errors + result.non2xx;
  };
  if (options.warmupSeconds > 0) for (let i = 0; i < procs.length; i++) await stretch(i, options.warmupSeconds, false);
  await inTurns(procs.length, options.rounds, (i) => stretch(i, options.seconds / options.rounds, true));
  return sums.map(({ answers, wall, cpu, ...rest }) => ({
    perSecond: answers / wall,
    perCore: answers / cpu,
    ...rest,
  }));
}

/**
 * Open-loop latency (ms) of one round; `allocKbPerRequest`: what the process's V8 heap allocated over the round
 * per request sent, `promotedKbPerRequest`: what of it young-generation collections promoted (alloc-probe.ts), for a
 * target whose process is probed.
 */
export interface LatencyRound {
  readonly p50: number;
  readonly p99: number;
  readonly allocKbPerRequest?: number | undefined;
  readonly promotedKbPerRequest?: number | undefined;
}
/** The rounds pooled, each round's own, and the failures (transport errors, timeouts and non-2xx answers). */
export type Latency = LatencyRound & { readonly errors: number; readonly rounds: readonly LatencyRound[] };

/**
 * Open loop over several targets in turns, each getting `seconds` in all: request i is due at start + i/rate
 * whatever happened to earlier ones, and its latency runs from that due time, so a stall counts against every
 * request it delayed (no coordinated omission). The generator's own timer lateness is included, alike for all.
 * A target with a process in `probed` has its heap's allocations measured over each of its rounds.
 */
export async function openLoop<Name extends string>(
  targets: Record<Name, Target>,
  rate: number,
  seconds: number,
  rounds: number,
  probed: Partial<Record<Name, Child>> = {},
): Promise<Record<Name, Latency>> {
  const runs = (Object.keys(targets) as Name[]).map((name) => ({
    name,
    target: targets[name],
    probe: probed[name],
    pool: new Pool(targets[name].url, { connections: 64, headersTimeout: 10_000, bodyTimeout: 10_000 }),
    latencies: [] as number[],
    rounds: [] as LatencyRound[],
    errors: 0,
  }));
  try {
    await inTurns(runs.length, rounds, async (index) => {
      const run = runs[index];
      if (!run) return;
      const count = Math.max(1, Math.round((rate * seconds) / rounds));
      const first = run.latencies.length;
      await run.probe?.ask('alloc-start');
      run.errors += await paced(run.pool, run.target, rate, count, run.latencies);
      const allocated = await run.probe?.ask('alloc-stop');
      const latencies = run.latencies.slice(first);
      run.rounds.push({
        p50: percentile(latencies, 0.5),
        p99: percentile(latencies, 0.99),
        allocKbPerRequest: allocated === undefined ? undefined : Number(allocated.bytes) / count / 1024,
        promotedKbPerRequest: allocated === undefined ? undefined : Number(allocated.promoted) / count / 1024,
      });
    });
  } finally {
    await Promise.all(runs.map((run) => run.pool.close()));
  }
  const result = {} as Record<Name, Latency>;
  for (const { name, latencies, errors, rounds: each } of runs) {
    result[name] = {
      p50: percentile(latencies, 0.5),
      p99: percentile(latencies, 0.99),
      allocKbPerRequest: mean(each.map((r) => r.allocKbPerRequest)),
      promotedKbPerRequest: mean(each.map((r) => r.promotedKbPerRequest)),
      errors,
      rounds: each,
    };
  }
  return result;
}

/** The mean of the figures measured; undefined when none was. */
function mean(figures: ReadonlyArray<number | undefined>): number | undefined {
  const measured = figures.filter((figure) => figure !== undefined);
  return measured.length === 0 ? undefined : measured.reduce((a, b) => a + b, 0) / measured.length;
}

/** `count` requests of the open loop on `pool`; pushes each one's latency (ms) and returns the failures. */
async function paced(pool: Pool, target: Target, rate: number, count: number, latencies: number[]): Promise<number> {
  let errors = 0;
  /** What the failures were (status and error code, or the transport error's code): said on stderr. */
  const kinds = new Map<string, number>();
  const failed = (kind: string): void => {
    errors++;
    kinds.set(kind, (kinds.get(kind) ?? 0) + 1);
  };
  const sent: Promise<void>[] = [];
  const send = async (due: number): Promise<void> => {
    try {
      const headers = target.perRequest ? { ...target.headers, ...target.perRequest() } : target.headers;
      const res = await pool.request({ method: 'POST', path: ROUTE, headers, body: target.body });
      if (res.statusCode >= 200 && res.statusCode <= 299) await res.body.dump();
      else failed(`${res.statusCode} ${errorCodeOf(await res.body.text())}`);
    } catch (error) {
      failed((error as { code?: string }).code ?? (error as Error).name);
    }
    latencies.push(performance.now() - due);
  };
  const start = performance.now();
  for (let i = 0; i < count; i++) {
    const due = start + (i * 1000) / rate;
    const wait = due - performance.now(); // read once: a second read can make it negative, which Node 24 warns of
    if (wait > 0) await sleep(wait);
    sent.push(send(due));
  }
  await Promise.all(sent);
  if (kinds.size > 0) process.stderr.write(`failures at ${target.url}: ${JSON.stringify(Object.fromEntries(kinds))}\n`);
  return errors;
}

/** The `code` of a JSON error answer (a sidecar.* code or the gateway's), or `-`. */
function errorCodeOf(body: string): string {
  try {
    const { code } = JSON.parse(body) as { code?: unknown };
    return typeof code === 'string' ? code : '-';
  } catch {
    return '-';
  }
}
