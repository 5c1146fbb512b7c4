// A Sentinel lost while the primary serves: node-redis asks another Sentinel, and the store stays available. The
// Sentinels are the way to the primary, not the data's path: a Sentinel that dies is no outage of the store, no
// `state_store.down` line, no token refreshed alone for it. A primary, one replica and three Sentinels, real
// processes on 127.0.0.1.
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

describe('a Sentinel lost while the primary serves', () => {
  it('two of the three Sentinels killed in turn under commands: the store stays available, every command answered', async () => {
    const lines: string[] = [];
    const store = new RedisStateStore({
      topology: set.topology,
      accountTag: accountTag('https://gateway.test', 'merchant@example.test'),
      commandTimeoutMs: 2_000,
      log: createLogger('debug', { write: (line: string) => void lines.push(line) }),
    });
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
      // The first is the one node-redis found first and listens to; after it, the one it moved to, or another.
      for (const index of [0, 1]) {
        await set.killSentinel(index);
        await sleep(1_500);
      }
      running = false;
      await traffic;
      assert.ok(commands > 50, `commands went on: ${commands}`);
      assert.deepEqual(failures, [], 'every command answered');
      assert.deepEqual(changes, [], 'the store never went down');
      assert.equal(store.isAvailable(), true);
      assert.equal(
        lines.filter((line) => line.includes('"event":"state_store.down"')).length,
        0,
        `no state_store.down line: ${lines.join('')}`,
      );
    } finally {
      await store.close();
    }
  });
});
