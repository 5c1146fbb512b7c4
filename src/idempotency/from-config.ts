import type { Config } from '../config/config.js';
import type { Logger } from '../observability/log.js';
import type { StateStore } from '../state/state-store.js';
import { longestRequestMs, TOKEN_WAIT_MS } from './deadline.js';
import { IdempotencyKeeper } from './keeper.js';

/** The keeper the settings describe, on the sidecar's one state store (memory for a pod, Redis for a fleet). */
export function keeperFromConfig(config: Config, store: StateStore, log: Logger, now: () => number): IdempotencyKeeper {
  const { connectTimeoutMs, responseTimeoutMs, connectRetryDeadlineMs } = config.upstream;
  return new IdempotencyKeeper({
    store,
    ttlMs: config.idempotency.ttlSeconds * 1000,
    longestRequestMs: longestRequestMs({
      tokenWaitMs: TOKEN_WAIT_MS,
      connectTimeoutMs,
      responseTimeoutMs,
      connectRetryDeadlineMs,
    }),
    now,
    log,
  });
}
