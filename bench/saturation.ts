import type { KeyObject } from 'node:crypto';
import { loadedRun, type LoadedRun } from './measure.js';
import { signLimit } from './sign-limit.js';

export interface Slice {
  readonly run: LoadedRun;
  /** Mean of the signing limits measured right before and right after this slice (sig/s per CPU second). */
  readonly limit: number;
  readonly ratio: number;
}

export interface Saturation {
  readonly slices: readonly Slice[];
  /** The slice with the median ratio: the headline numbers all come from it, so they agree with each other. */
  readonly median: Slice;
  readonly limits: readonly number[];
}

/**
 * Saturation in slices, each between two measurements of the signing limit (the sidecar idle meanwhile). This
 * host's speed drifts by up to 20% within minutes, and the ratio must compare the sidecar and the limit at the
 * same moment: a limit measured once, seconds away from the load, moved single runs by more than the
 * optimisations being measured. The median slice is reported, and the spread of all slices next to it.
 */
export async function slicedSaturation(
  key: KeyObject,
  target: { url: string; path: string; pid: number; connections: number },
  seconds: number,
  signSeconds: number,
): Promise<Saturation> {
  const count = Math.max(1, Math.round(seconds / 2));
  const signEach = signSeconds / (count + 1);
  const limits = [signLimit(key, signEach).perCpuSecond];
  const slices: Slice[] = [];
  for (let i = 0; i < count; i++) {
    const run = await loadedRun(target.url, target.path, target.pid, seconds / count, target.connections);
    limits.push(signLimit(key, signEach).perCpuSecond);
    const limit = ((limits[i] as number) + (limits[i + 1] as number)) / 2;
    slices.push({ run, limit, ratio: run.perCore / limit });
  }
  const byRatio = [...slices].sort((a, b) => a.ratio - b.ratio);
  return { slices, median: byRatio[Math.floor(byRatio.length / 2)] as Slice, limits };
}
