import { randomUUID } from 'node:crypto';
import { performance } from 'node:perf_hooks';
import type { Config } from '../config/config.js';
import { redisStoreOptions } from '../state/open-store.js';
import { REDIS_CONNECT_TIMEOUT_MS } from '../state/redis-client.js';
import { RedisStateStore } from '../state/redis-store.js';
import type { CheckReport } from './check-report.js';

/** One connection attempt (TCP, TLS, AUTH, SELECT) and a little more: a down Redis fails in this time. */
const CONNECT_WAIT_MS = REDIS_CONNECT_TIMEOUT_MS + 500;

/**
 * `check`'s state store line. Redis: connect as `serve` would (TLS, CA, ACL user), PING within the command timeout,
 * and read one key under the prefix, so an ACL that lets the user in but not at its keys fails here rather than
 * on the first payment. Prints the URL (config refuses one with credentials) and the user, never the password.
 */
export async function checkStateStore(config: Config, report: CheckReport): Promise<void> {
  const { redis } = config.state;
  if (redis === undefined) {
    report.line('-', 'state store', 'memory (this pod only; SIDECAR_STATE_STORE=redis shares it across replicas)');
    return;
  }
  const where = `redis ${redis.url}${redis.username !== undefined ? ` as ${redis.username}` : ''}`;
  const store = new RedisStateStore(redisStoreOptions(config, redis));
  try {
    if (!(await store.whenAvailable(CONNECT_WAIT_MS, true))) {
      const reason = store.unavailableReason() ?? `no connection within ${CONNECT_WAIT_MS} ms`;
      report.line('✘', 'state store', `${where}: ${reason}`);
      return;
    }
    const started = performance.now();
    await store.ping();
    const ms = performance.now() - started;
    await store.get('check');
    const replicas = await acknowledgedWrite(store, redis.minReplicasAcked);
    report.line(
      '✔',
      'state store',
      `${where}: PING answered in ${ms.toFixed(1)} ms (timeout ${redis.commandTimeoutMs} ms), keys under ${redis.keyPrefix} readable${replicas}`,
    );
  } catch (err) {
    report.line('✘', 'state store', `${where}: ${(err as Error).message}`);
  } finally {
    await store.close();
  }
}

/**
 * With SIDECAR_REDIS_MIN_REPLICAS_ACKED, one write as an idempotency claim makes it (a throwaway key that expires in
 * a second): a primary without enough replicas in sync fails here, not on the first keyed payment.
 */
async function acknowledgedWrite(store: RedisStateStore, replicas: number): Promise<string> {
  if (replicas === 0) return '';
  await store.setIfAbsent(`check:${randomUUID()}`, '1', 1_000, { acknowledged: true });
  return `, a write acknowledged by ${replicas} replica${replicas === 1 ? '' : 's'}`;
}
