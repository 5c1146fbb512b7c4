// Memory is a figure of a process, not of a round: what its start-up met (a collection or not, the young
// generation's size) and which of glibc's arenas its threads happened to fill (1 to 9 MB of difference between two
// starts of the same program under the same load, here). The rounds of one pair of processes share that draw; a
// figure of one pair is one draw. Fresh pairs make it a measurement: each pair started anew, read at rest, then
// saturated in turns, and each comparison made within its pair.
import { setTimeout as sleep } from 'node:timers/promises';
import { saturate, type Saturation } from './load.js';
import { rssMb, type Child } from './processes.js';

/** One process of a pair: RSS at rest and its peak under saturation (MB), each with its anonymous part. */
export interface Memory {
  readonly restMb: number;
  readonly restAnonMb: number;
  readonly loadMb: number;
  /** The anonymous part at the peak of the round that peaked highest. */
  readonly loadAnonMb: number;
}

export interface PairReading {
  readonly memory: readonly [Memory, Memory];
  /** Each process's saturated rounds: for what else the pair's turns measure (answers per CPU second). */
  readonly saturation: readonly [Saturation, Saturation];
}

export interface FreshPairsOptions {
  readonly pairs: number;
  readonly restSeconds: number;
  readonly warmupSeconds: number;
  /** Each process's saturated seconds in all, in `rounds` turns. */
  readonly seconds: number;
  readonly rounds: number;
  readonly connections: number;
}

/**
 * `pairs` pairs in turn, each started by `start` (one after the other, nothing else starting meanwhile): read after
 * `restSeconds` idle, then saturated in turns. Every pair but the last is stopped; the last is returned running.
 */
export async function freshPairs(
  start: () => Promise<readonly [Child, Child]>,
  options: FreshPairsOptions,
): Promise<{ readonly readings: readonly PairReading[]; readonly last: readonly [Child, Child] }> {
  const readings: PairReading[] = [];
  for (let pair = 0; ; pair++) {
    const procs = await start();
    await sleep(options.restSeconds * 1000);
    const [restA, restB] = [atRest(procs[0]), atRest(procs[1])];
    const [a, b] = await saturate(procs, options);
    if (!a || !b) throw new Error('a saturated process has no figures');
    readings.push({
      memory: [
        { ...restA, ...peak(a) },
        { ...restB, ...peak(b) },
      ],
      saturation: [a, b],
    });
    if (pair === options.pairs - 1) return { readings, last: procs };
    await Promise.all(procs.map((p) => p.stop()));
  }
}

const atRest = (p: Child): Pick<Memory, 'restMb' | 'restAnonMb'> => ({
  restMb: rssMb(p.pid),
  restAnonMb: rssMb(p.pid, 'RssAnon'),
});

/** The peak over the warm-up and the rounds; its anonymous part from the round that peaked highest. */
const peak = (s: Saturation): Pick<Memory, 'loadMb' | 'loadAnonMb'> => {
  const highest = Math.max(...s.rounds.map((r) => r.rssMaxMb));
  return { loadMb: s.rssMaxMb, loadAnonMb: s.rounds.find((r) => r.rssMaxMb === highest)?.anonAtMaxMb ?? Number.NaN };
};
