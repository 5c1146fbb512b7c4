import { randomUUID } from 'node:crypto';
import { performance } from 'node:perf_hooks';
import type { Config } from '../config/config.js';
import type { RedisNode, RedisTopology } from '../config/state-settings.js';
import type { TopologyView } from '../state/redis-client.js';
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
  const where = `redis ${describeTopology(redis.topology)}${redis.username !== undefined ? ` as ${redis.username}` : ''}`;
  const store = new RedisStateStore(redisStoreOptions(config, redis));
  try {
    if (!(await store.whenAvailable(CONNECT_WAIT_MS, true))) {
      const reason = store.unavailableReason() ?? `no connection within ${CONNECT_WAIT_MS} ms`;
      report.line('✘', 'state store', `${where}: ${reason}`);
      return;
    }
    // The topology first: a cluster with a slot no primary serves refuses every command (CLUSTERDOWN), and the
    // operator needs to read why.
    const view = await store.topology();
    const broken = brokenTopology(view, redis.minReplicasAcked);
    if (broken !== undefined) {
      report.line('✘', 'state store', `${where}: ${describeView(view)}; ${broken}`);
      return;
    }
    const started = performance.now();
    await store.ping();
    const ms = performance.now() - started;
    await store.get('check');
    // As the token lock is set: a user whose rules lack +pttl gets locks that could be held for ever.
    await store.setIfAbsent(`check:${randomUUID()}`, '1', 1_000, { bounded: true });
    if (!store.boundedWritesPermitted) {
      report.line(
        '!',
        'state store',
        `${where}: the Redis user may not run PTTL; add +pttl (docs/fleet.md#the-redis-user)`,
      );
    }
    const wanted = redis.minReplicasAcked === 'auto' ? (view.replicas > 0 ? 1 : 0) : redis.minReplicasAcked;
    const replicas = await acknowledgedWrite(store, wanted);
    report.line(
      '✔',
      'state store',
      `${where}: ${describeView(view)}; PING answered in ${ms.toFixed(1)} ms (timeout ${redis.commandTimeoutMs} ms), keys under ${redis.keyPrefix} readable${replicas}`,
    );
  } catch (err) {
    report.line('✘', 'state store', `${where}: ${(err as Error).message}`);
  } finally {
    await store.close();
  }
}

function describeTopology(topology: RedisTopology): string {
  if (topology.mode === 'standalone') return topology.url;
  const nodes = (list: readonly RedisNode[]) => list.map((node) => `${node.host}:${node.port}`).join(',');
  if (topology.mode === 'sentinel') return `sentinel ${topology.master} via ${nodes(topology.sentinels)}`;
  return `cluster via ${nodes(topology.nodes)}`;
}

function describeView(view: TopologyView): string {
  const replicas = `${view.replicas} replica${view.replicas === 1 ? '' : 's'}`;
  if (view.slotsCovered === undefined) return `primary ${view.primary ?? 'unknown'}, ${replicas}`;
  return `${view.primaries ?? 0} primaries, ${replicas}, ${view.slotsCovered} of ${CLUSTER_SLOTS} slots covered`;
}

const CLUSTER_SLOTS = 16_384;

/** What makes a topology unusable for the sidecar, or undefined. */
function brokenTopology(view: TopologyView, wanted: number | 'auto'): string | undefined {
  if (view.slotsCovered !== undefined && view.slotsCovered < CLUSTER_SLOTS) {
    return 'the cluster does not cover every hash slot (a primary is missing): some accounts have no node';
  }
  if (typeof wanted === 'number' && view.replicas < wanted) {
    return `SIDECAR_REDIS_MIN_REPLICAS_ACKED is ${wanted} but the primary has ${view.replicas}: every keyed payment would be refused`;
  }
  return undefined;
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
