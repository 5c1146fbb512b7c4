import type { Config } from '../config/config.js';
import type { Logger } from '../observability/log.js';
import type { StateStore } from '../state/state-store.js';
import { claimDeadlineMs } from './deadline.js';
import { IdempotencyKeeper } from './keeper.js';

/**
 * The keeper the settings describe, on the sidecar's one state store (memory for a pod, Redis for a fleet, which
 * signs its records when SIDECAR_STATE_MAC_KEY_FILE is set). Its claims stand for the request deadline
 * (`requestDeadlineMs`, worked out beside the request from the token and connection settings) and more.
 */
export function keeperFromConfig(
  config: Config,
  requestDeadlineMs: number,
  store: StateStore,
  log: Logger,
  now: () => number,
): IdempotencyKeeper {
  return new IdempotencyKeeper({
    store,
    ttlMs: config.idempotency.ttlSeconds * 1000,
    claimDeadlineMs: claimDeadlineMs(requestDeadlineMs, storeWriteMs(config)),
    leaseMs: config.idempotency.leaseMs,
    now,
    log,
  });
}

/**
 * The longest one write of a record may take: the memory store answers at once; Redis may take up to its command
 * timeout per command, and a write that waits for replicas is two commands.
 */
function storeWriteMs(config: Config): number {
  const redis = config.state.redis;
  if (redis === undefined) return 0;
  // `auto` in a cluster may wait for replicas: counted as if it does.
  return redis.commandTimeoutMs * (redis.minReplicasAcked === 0 ? 1 : 2);
}
