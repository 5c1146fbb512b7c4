import { saturate, type ThroughputResult } from './closed-loop.js';
import { cpuSeconds, rssMb } from './processes.js';

export interface LoadedRun extends ThroughputResult {
  /** Cores of CPU the sidecar process used on average (user + system, all threads) during the run. */
  readonly cores: number;
  readonly perCore: number;
  readonly rssMaxMb: number;
  /** RSS samples (MB) taken once a second. */
  readonly rssSamples: readonly number[];
}

/** Saturates the sidecar while reading its CPU time and RSS from /proc. */
export async function loadedRun(url: string, path: string, pid: number, seconds: number, connections: number): Promise<LoadedRun> {
  const samples: number[] = [];
  let rssMaxMb = rssMb(pid);
  const fast = setInterval(() => (rssMaxMb = Math.max(rssMaxMb, rssMb(pid))), 250);
  const slow = setInterval(() => samples.push(rssMb(pid)), 1000);
  const cpu0 = cpuSeconds(pid);
  const t0 = performance.now();
  try {
    const result = await saturate(url, path, seconds, connections);
    const wall = (performance.now() - t0) / 1000;
    const cores = (cpuSeconds(pid) - cpu0) / wall;
    const rps = result.total / wall;
    return { ...result, requestsPerSecond: rps, cores, perCore: rps / cores, rssMaxMb, rssSamples: samples };
  } finally {
    clearInterval(fast);
    clearInterval(slow);
  }
}

/** Growth over a soak: median of the last five one-second samples minus median of seconds 5 to 10. */
export function soakGrowthMb(samples: readonly number[]): { startMb: number; endMb: number; growthMb: number } {
  const median = (xs: readonly number[]): number => {
    const s = [...xs].sort((a, b) => a - b);
    return s[Math.floor(s.length / 2)] ?? Number.NaN;
  };
  const start = samples.length >= 15 ? samples.slice(5, 10) : samples.slice(0, Math.max(1, Math.floor(samples.length / 2)));
  const end = samples.slice(-5);
  const startMb = median(start);
  const endMb = median(end);
  return { startMb, endMb, growthMb: endMb - startMb };
}
