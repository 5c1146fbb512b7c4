// What one Redis command costs, the unit of what an Idempotency-Key costs (a claim and a completion); the
// throwaway redis-server is the test suite's (loopback, no persistence, removed at exit).
import { setTimeout as sleep } from 'node:timers/promises';
import { createClient } from '@redis/client';
import { percentile } from './load.js';
export { startRedis } from '../test/support/redis-server.js';

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
