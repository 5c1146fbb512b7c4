// What one Redis command costs, the unit of what an Idempotency-Key costs (a claim and a completion); the
// throwaway redis-server is the test suite's (loopback, no persistence, removed at exit).
import { setTimeout as sleep } from 'node:timers/promises';
import { createClient } from '@redis/client';
import { percentile } from './load.js';
import { startRedis } from '../test/support/redis-server.js';

/** One fresh `SET NX PX` (a key's claim) at `rate` a second, timed from the call to the reply: p50 in ms. */
export async function commandP50(url: string, rate: number, seconds: number): Promise<number> {
  const client = createClient({ url, disableOfflineQueue: true });
  client.on('error', () => {}); // a failure surfaces as the command's own rejection
  await client.connect();
  const samples: number[] = [];
  try {
    for (let i = 0; i < Math.max(1, Math.round(rate * seconds)); i++) {
      const start = performance.now();
      await client.set(`bench:${i}`, 'in_progress', { condition: 'NX', expiration: { type: 'PX', value: 60_000 } });
      samples.push(performance.now() - start);
      await sleep(Math.max(0, 1000 / rate - (performance.now() - start)));
    }
  } finally {
    client.destroy();
  }
  return percentile(samples, 0.5);
}

/** A redis-server and one replica of it, in sync: the replica acknowledges the sidecar's writes (WAIT 1). */
export async function startReplicatedRedis() {
  const primary = await startRedis({ args: ['--repl-diskless-sync-delay', '0'] });
  const replica = await startRedis({ args: ['--replicaof', '127.0.0.1', String(primary.port)] });
  const inSync = async () =>
    (await replica.cli('INFO', 'replication')).some((l) => l.trim() === 'master_link_status:up');
  for (const end = Date.now() + 10_000; !(await inSync()); await sleep(50)) {
    if (Date.now() > end) throw new Error('the replica did not sync within 10 s');
  }
  return { primary, replica };
}
