// What a Sentinel-mode store opens (docs/fleet.md, "Connections to Redis"): one node-redis Sentinel client, whose
// pub/sub has a connection of its own, so 2 connections to the primary and 1 to one Sentinel; with acknowledged
// writes, their 4 links add one each to the primary and to a Sentinel. Each client node-redis makes also costs the
// event loop 25-180 ms (docs/performance.md), so a second client for pub/sub would double that at start.
// A primary, one replica and three Sentinels, real processes on 127.0.0.1.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { after, before, describe, it } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { accountTag } from '../../src/state/redis-keys.js';
import { RedisStateStore } from '../../src/state/redis-store.js';
import type { TestRedis } from '../support/redis-server.js';
import { startSentinelSet, type SentinelSet } from '../support/redis-topologies.js';

let set: SentinelSet;
let primary: TestRedis;

before(async () => {
  set = await startSentinelSet();
  const named = await set.settled(30_000);
  const node = set.nodes.find((candidate) => named === `127.0.0.1:${candidate.port}`);
  assert.ok(node !== undefined, `the Sentinels name a node of the set (${named})`);
  primary = node;
});
after(async () => {
  await set.close();
});

/** Client connections that are not Redis's own (replicas, Sentinels) nor this count's. */
const clientsOf = (lines: readonly string[]): number =>
  lines.filter((line) => line.includes('addr=') && !/name=sentinel|flags=S|cmd=client\|list/.test(line)).length;

async function connections(): Promise<{ primary: number; sentinels: number }> {
  const sentinels = set.sentinelPorts.map((port) =>
    clientsOf(execFileSync('redis-cli', ['-p', String(port), 'CLIENT', 'LIST'], { encoding: 'utf8' }).split('\n')),
  );
  return { primary: clientsOf(await primary.cli('CLIENT', 'LIST')), sentinels: sentinels.reduce((a, b) => a + b, 0) };
}

describe('the connections of a Sentinel-mode store', () => {
  for (const [acknowledged, expected] of [
    [0, { primary: 2, sentinels: 1 }],
    [1, { primary: 6, sentinels: 5 }],
  ] as const) {
    it(`SIDECAR_REDIS_MIN_REPLICAS_ACKED=${acknowledged}: ${expected.primary} to the primary, ${expected.sentinels} to the Sentinels, pub/sub working`, async () => {
      const store = new RedisStateStore({
        topology: set.topology,
        accountTag: accountTag('https://gateway.test', 'merchant@example.test'),
        commandTimeoutMs: 2_000,
        minReplicasAcked: acknowledged,
      });
      try {
        assert.equal(await store.whenAvailable(15_000), true, 'the store connects');
        const received: string[] = [];
        await store.subscribe('connections', (message) => received.push(message));
        await store.publish('connections', 'hello');
        for (let n = 0; received.length === 0 && n < 100; n++) await sleep(20);
        assert.deepEqual(received, ['hello'], 'a message published by the store reaches its subscriber');
        // The Sentinel client connects to the Sentinel it listens to once it is ready: give it a moment.
        let seen = await connections();
        for (let n = 0; seen.sentinels < expected.sentinels && n < 50; n++) {
          await sleep(100);
          seen = await connections();
        }
        assert.deepEqual(seen, expected);
      } finally {
        await store.close();
      }
      for (let n = 0; (await connections()).primary > 0 && n < 50; n++) await sleep(100);
      assert.deepEqual(await connections(), { primary: 0, sentinels: 0 }, 'closed: nothing left open');
    });
  }
});
