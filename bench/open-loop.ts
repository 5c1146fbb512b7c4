import { Pool } from 'undici';
import type { Target } from './payload.js';

export interface LatencyResult {
  readonly rate: number;
  readonly sent: number;
  readonly errors: number;
  readonly non2xx: number;
  /** Milliseconds, measured from each request's intended send time. */
  readonly p50: number;
  readonly p99: number;
  readonly p999: number;
  readonly max: number;
  /** How late the generator itself sent, p99 (ms): its own timer jitter, included in the latencies above. */
  readonly sendLagP99: number;
}

/**
 * An open-loop generator: request i is due at start + i/rate whatever happened to earlier ones, and its latency
 * runs from that intended time, not from when it was actually written. A stall therefore counts against every
 * request it delayed, which is the correction for coordinated omission that a closed-loop tool (or autocannon's
 * rate mode, which measures from the actual send) leaves out. Enough connections that the pool never queues at
 * these rates; if it did, the queueing would be measured too.
 */
export async function openLoop(target: Target, path: string, rate: number, seconds: number): Promise<LatencyResult> {
  const pool = new Pool(target.url, { connections: 64, pipelining: 1 });
  const total = Math.max(1, Math.round(rate * seconds));
  const latencies = new Float64Array(total);
  const lags = new Float64Array(total);
  const intervalMs = 1000 / rate;
  let errors = 0;
  let non2xx = 0;
  let sent = 0;
  const inFlight: Array<Promise<void>> = [];
  const start = performance.now() + 20;
  const one = async (index: number, intended: number): Promise<void> => {
    lags[index] = performance.now() - intended;
    try {
      const res = await pool.request({ method: 'POST', path, headers: target.headers, body: target.body });
      await res.body.dump();
      if (res.statusCode < 200 || res.statusCode >= 300) non2xx++;
    } catch {
      errors++;
    }
    latencies[index] = performance.now() - intended;
  };
  await new Promise<void>((resolve) => {
    // Timers fire late by up to a millisecond or so; every request that became due meanwhile is sent at once,
    // and its lateness is part of its measured latency (the same for both targets, so it cancels in "added").
    const tick = () => {
      const now = performance.now();
      while (sent < total && start + sent * intervalMs <= now) {
        inFlight.push(one(sent, start + sent * intervalMs));
        sent++;
      }
      if (sent >= total) return resolve();
      setTimeout(tick, Math.max(0, start + sent * intervalMs - performance.now()));
    };
    setTimeout(tick, 20);
  });
  await Promise.all(inFlight);
  await pool.close();
  latencies.sort();
  lags.sort();
  const p = (q: number): number => pct(latencies, q);
  return { rate, sent, errors, non2xx, p50: p(0.5), p99: p(0.99), p999: p(0.999), max: latencies[total - 1] ?? 0, sendLagP99: pct(lags, 0.99) };
}

function pct(sorted: Float64Array, q: number): number {
  return sorted[Math.min(sorted.length - 1, Math.ceil(q * sorted.length) - 1)] ?? 0;
}
