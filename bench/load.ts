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
  lateness.sort((a, b) => a - b);
  return lateness[Math.ceil(0.99 * lateness.length) - 1] ?? Number.NaN;
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

/** Closed loop: `connections` clients, each sending its next request as soon as it has an answer. */
export async function saturate(proc: Child, seconds: number, connections: number): Promise<Saturation> {
  const rss = watchRss(proc.pid, 250);
  const cpu0 = cpuSeconds(proc.pid);
  const start = performance.now();
  try {
    const url = `${proc.url}${ROUTE}`;
    const result = await autocannon({
      url,
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: PAYLOAD,
      connections,
      duration: seconds,
      timeout: 10,
    });
    const wall = (performance.now() - start) / 1000;
    const cores = (cpuSeconds(proc.pid) - cpu0) / wall;
    const perSecond = result['2xx'] / wall;
    return {
      perSecond,
      cores,
      perCore: perSecond / cores,
      rssMaxMb: Math.max(...rss.samples),
      errors: result.errors + result.non2xx,
    };
  } finally {
    rss.stop();
  }
}

/**
 * Open loop: request i is due at start + i/rate whatever happened to earlier ones, and its latency runs from that
 * due time, so a stall counts against every request it delayed (no coordinated omission). The generator's own
 * timer lateness is included, alike for every target.
 */
export async function openLoop(
  target: Target,
  rate: number,
  seconds: number,
): Promise<{ p50: number; p99: number; errors: number }> {
  const pool = new Pool(target.url, { connections: 64, headersTimeout: 10_000, bodyTimeout: 10_000 });
  const latencies: number[] = [];
  const sent: Promise<void>[] = [];
  let errors = 0;
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
  await pool.close();
  latencies.sort((a, b) => a - b);
  const percentile = (q: number): number => latencies[Math.ceil(q * latencies.length) - 1] ?? Number.NaN;
  return { p50: percentile(0.5), p99: percentile(0.99), errors };
}
