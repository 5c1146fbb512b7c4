// node --import tsx bench/sentinel-loop.ts [--rounds 3]
//
// How long the event loop is held while a Sentinel-mode store is created and connects, and while it follows a
// failover (the primary paused, SIGSTOP, until the Sentinels name another): per phase, the longest single stall
// (perf_hooks monitorEventLoopDelay) and the time held in stalls of 20 ms or more. The store runs in a child process of
// its own, so that what the bench does to the Sentinel set (redis-cli, signals) is not counted; a primary, one replica
// and three Sentinels of the test suite (loopback, removed at exit). docs/performance.md ("Sentinel and the event
// loop") says where the time goes: node-redis builds a client's command methods for each client it makes, 25-180 ms
// on a loaded 2-core machine, which is why this is a bench and not a test with a bound.
import { fork } from 'node:child_process';
import { monitorEventLoopDelay } from 'node:perf_hooks';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import type { RedisTopology } from '../src/config/state-settings.js';
import { accountTag } from '../src/state/redis-keys.js';
import { RedisStateStore } from '../src/state/redis-store.js';
import { startSentinelSet } from '../test/support/redis-topologies.js';

/** Stalls of this much or more are added up: a 5 ms timer late by that much. */
const STALL_MS = 20;

type Command =
  { readonly do: 'create'; readonly topology: RedisTopology } | { readonly do: 'measure' } | { readonly do: 'report' };
interface Held {
  readonly longest: number;
  readonly held: number;
}

/** The child: one store, and the event loop's stalls between `measure` and `report`. */
function child(): void {
  const delay = monitorEventLoopDelay({ resolution: 1 });
  delay.enable();
  let held = 0;
  let last = performance.now();
  setInterval(() => {
    const now = performance.now();
    if (now - last - 5 >= STALL_MS) held += now - last - 5;
    last = now;
  }, 5);
  let store: RedisStateStore | undefined;
  const open = (topology: RedisTopology, account: string) =>
    new RedisStateStore({ topology, accountTag: accountTag('https://g.test', account), commandTimeoutMs: 2_000 });
  process.on('message', (command: Command) => {
    void (async () => {
      if (command.do === 'measure') {
        delay.reset();
        held = 0;
        return process.send?.('measuring');
      }
      if (command.do === 'report') {
        // Answering again: a failover is over for the store once a command goes through.
        for (;;) {
          if (
            await store?.ping().then(
              () => true,
              () => false,
            )
          )
            break;
          await sleep(50);
        }
        return process.send?.({ longest: Math.round(delay.max / 1e6), held: Math.round(held) } satisfies Held);
      }
      // The first store pays for loading the modules: closed, not counted.
      const warm = open(command.topology, 'warm');
      await warm.whenAvailable(30_000);
      await warm.close();
      await sleep(500);
      delay.reset();
      held = 0;
      store = open(command.topology, 'bench');
      await store.whenAvailable(30_000);
      await store.subscribe('bench', () => undefined);
      await sleep(1_000); // the Sentinel listener and pub/sub connect after the first answer
      process.send?.({ longest: Math.round(delay.max / 1e6), held: Math.round(held) } satisfies Held);
    })();
  });
}

async function parent(): Promise<void> {
  const { values } = parseArgs({ options: { rounds: { type: 'string', default: '3' } } });
  const set = await startSentinelSet();
  try {
    await set.settled(30_000);
    for (let i = 1; i <= Number(values.rounds); i++) {
      const store = fork(fileURLToPath(import.meta.url), ['--child'], { execArgv: ['--import', 'tsx'] });
      const next = () => new Promise<unknown>((resolve) => store.once('message', resolve));
      try {
        store.send({ do: 'create', topology: set.topology } satisfies Command);
        const create = (await next()) as Held;
        store.send({ do: 'measure' } satisfies Command);
        await next();
        const previous = await set.currentPrimary();
        const node = set.nodes.find((candidate) => previous === `127.0.0.1:${candidate.port}`);
        node?.freeze();
        await set.failedOver(previous, 30_000);
        store.send({ do: 'report' } satisfies Command);
        const failover = (await next()) as Held;
        node?.thaw();
        await set.settled(30_000);
        console.log(`round ${i}: event loop stalls (ms)`, JSON.stringify({ create, failover }));
      } finally {
        store.kill();
      }
    }
  } finally {
    await set.close();
  }
}

if (process.argv.includes('--child')) child();
else await parent();
