// A throwaway redis-server for `npm run bench -- --state-store redis`: loopback, no persistence, a free port (Redis
// cannot listen on port 0 and report it), stopped with the bench's other children. And how long one command takes
// on it: the unit of what an Idempotency-Key costs.
import { spawn } from 'node:child_process';
import { createInterface } from 'node:readline';
import { setTimeout as sleep } from 'node:timers/promises';
import { createClient } from '@redis/client';
import { percentile } from './load.js';
import { freePort } from '../test/support/free-port.js';
import { adopt, type Child } from './processes.js';

/** Resolves once redis-server says it accepts connections; `url` is its redis:// address. */
export async function startRedis(timeoutMs = 10_000): Promise<Child> {
  const port = await freePort();
  const args = ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no'];
  const child = spawn('redis-server', args, { stdio: ['ignore', 'pipe', 'pipe'] });
  const url = `redis://127.0.0.1:${port}`;
  return new Promise((resolve, reject) => {
    const fail = (why: string): void => {
      clearTimeout(timer);
      child.kill('SIGKILL');
      reject(new Error(`redis-server: ${why} (install the Debian package redis-server)`));
    };
    const timer = setTimeout(() => fail(`not ready within ${timeoutMs} ms`), timeoutMs);
    child.once('error', (err) => fail(err.message));
    child.once('exit', (code) => fail(`exited early (${code})`));
    createInterface({ input: child.stdout }).on('line', (line) => {
      if (!line.includes('Ready to accept connections')) return;
      clearTimeout(timer);
      child.removeAllListeners('exit');
      resolve(adopt(child, url));
    });
  });
}

/**
 * One command's round trip (ms) at `rate` commands a second, as a sidecar sees it: a fresh `SET NX PX`, the shape
 * of an Idempotency-Key's claim, timed from the call to the reply.
 */
export async function commandLatency(
  url: string,
  rate: number,
  seconds: number,
): Promise<{ p50: number; p99: number }> {
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
  return { p50: percentile(samples, 0.5), p99: percentile(samples, 0.99) };
}
