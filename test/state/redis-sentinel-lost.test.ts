// Sentinels lost while the primary serves: the Sentinels are the way to the primary, not the data's path. One of them
// down at start, or dying later, is no outage of the store (no `state_store.down` line, no token taken alone for
// it): node-redis asks another. Every one of them down at start is known at once. A primary, one replica and three
// Sentinels, real processes on 127.0.0.1; the cases run in order, each killing one more Sentinel.
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { createLogger } from '../../src/observability/log.js';
import { accountTag } from '../../src/state/redis-keys.js';
import { RedisStateStore } from '../../src/state/redis-store.js';
import { startSentinelSet, type SentinelSet } from '../support/redis-topologies.js';

let set: SentinelSet;

before(async () => {
  set = await startSentinelSet();
  await set.settled(30_000);
});
after(async () => {
  await set.close();
});

/** A store on the set, and the lines it logs. */
function openStore(): { store: RedisStateStore; lines: string[] } {
  const lines: string[] = [];
  const store = new RedisStateStore({
    topology: set.topology,
    accountTag: accountTag('https://gateway.test', 'merchant@example.test'),
    commandTimeoutMs: 2_000,
    log: createLogger('debug', { write: (line: string) => void lines.push(line) }),
  });
  return { store, lines };
}

const downLines = (lines: readonly string[]) => lines.filter((line) => line.includes('"event":"state_store.down"'));

describe('Sentinels lost while the primary serves', () => {
  it('the first Sentinel listed down at start: the store connects through the next one, never down', async () => {
    await set.killSentinel(0);
    const { store, lines } = openStore();
    try {
      // What a replica's first token waits for (settle: false at the store's first failure, and a login alone).
      assert.equal(await store.whenAvailable(15_000, true), true, 'connected, not failed');
      assert.deepEqual(downLines(lines), [], 'no state_store.down line');
    } finally {
      await store.close();
    }
  });

  it('the Sentinel it listens to killed under commands: the store stays available, every command answered', async () => {
    const { store, lines } = openStore();
    try {
      assert.equal(await store.whenAvailable(15_000), true, 'the store connects');
      const changes: boolean[] = [];
      store.onAvailabilityChange((available) => changes.push(available));
      let commands = 0;
      const failures: string[] = [];
      let running = true;
      const traffic = (async () => {
        while (running) {
          await store.setIfAbsent(`k${commands++}`, 'v', 60_000).catch((err: Error) => failures.push(err.message));
          await sleep(10);
        }
      })();
      try {
        // The first listed is dead: node-redis found the second first, and listens to it.
        await set.killSentinel(1);
        await sleep(2_000);
      } finally {
        running = false;
        await traffic;
      }
      assert.ok(commands > 50, `commands went on: ${commands}`);
      assert.deepEqual(failures, [], 'every command answered');
      assert.deepEqual(changes, [], 'the store never went down');
      assert.equal(store.isAvailable(), true);
      assert.deepEqual(downLines(lines), [], 'no state_store.down line');
    } finally {
      await store.close();
    }
  });

  it('every Sentinel down at start: the store has failed at once, naming the refusal', async () => {
    await set.killSentinel(2);
    const { store, lines } = openStore();
    try {
      const started = performance.now();
      assert.equal(await store.whenAvailable(15_000, true), false);
      const tookMs = performance.now() - started;
      assert.ok(tookMs < 5_000, `failed within a round of the Sentinels, not the wait: ${tookMs.toFixed(0)} ms`);
      assert.match(downLines(lines).join(''), /"reason":"[^"]*ECONNREFUSED/);
    } finally {
      await store.close();
    }
  });
});
