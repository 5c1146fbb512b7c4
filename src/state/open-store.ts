import { readFile } from 'node:fs/promises';
import type { Config } from '../config/config.js';
import { passwordFromFile } from '../config/secret-files.js';
import type { Secret } from '../config/secret.js';
import type { RedisConfig } from '../config/state-settings.js';
import type { Logger } from '../observability/log.js';
import type { StateStoreMetrics } from '../observability/state-store-metrics.js';
import { MemoryStateStore } from './memory-store.js';
import { accountTag } from './redis-keys.js';
import { refusedRecordReport } from './refused-record.js';
import type { RedisStateStore, RedisStoreOptions } from './redis-store.js';

/**
 * How long start waits for a first answer from Redis. A healthy Redis answers in milliseconds, and a replica that
 * starts with the store up serves keyed payments and postbacks from its first request. A Redis that fails (refused,
 * connect timeout, wrong password) ends the wait at its first failure; only a Redis that is slow to answer, without
 * failing, costs up to this much start time once (well within the startup probe's 30 s); then the sidecar serves and
 * keeps connecting in the background. Its first token goes on waiting for such a store on its own
 * (DEFAULT_FIRST_CONNECT_WAIT_MS, fleet-token.ts): a replica that logged in alone at the end of a wait like this one
 * logged the fleet's callers out on a gateway where a login revokes earlier tokens (found by `npm run chaos`).
 */
export const FIRST_CONNECT_WAIT_MS = 10_000;

export interface StoreDeps {
  readonly metrics?: StateStoreMetrics;
  readonly log?: Logger;
}

/**
 * The Redis password as the file holds it now, read at each connection attempt: after a rotation (a new password
 * on the ACL user, the Secret updated) every new connection uses the new one, with no restart. A file that cannot
 * be read, or holds nothing, gives the password loaded at start (the connection then fails or not, and says so).
 */
function passwordSource(file: string, atStart: Secret | undefined): () => Promise<string> {
  return async () => {
    try {
      return passwordFromFile('SIDECAR_REDIS_PASSWORD_FILE', file, await readFile(file, 'utf8')).reveal();
    } catch {
      return atStart?.reveal() ?? '';
    }
  };
}

/** The Redis store's options from the settings (also used by `check`). */
export function redisStoreOptions(config: Config, redis: RedisConfig): RedisStoreOptions {
  return {
    topology: redis.topology,
    tls: redis.tls,
    username: redis.username,
    password: redis.passwordFile === undefined ? undefined : passwordSource(redis.passwordFile, redis.password),
    sentinelPassword:
      redis.topology.mode === 'sentinel' && redis.topology.sentinelPasswordFile !== undefined
        ? passwordSource(redis.topology.sentinelPasswordFile, redis.topology.sentinelPassword)
        : undefined,
    ca: redis.ca,
    keyPrefix: redis.keyPrefix,
    // The account is the base address and the username: a staging and a production sidecar, or two merchants,
    // on one Redis never share a token record.
    accountTag: accountTag(`${config.base.origin}${config.base.pathPrefix}`, config.username),
    commandTimeoutMs: redis.commandTimeoutMs,
    minReplicasAcked: redis.minReplicasAcked,
  };
}

/**
 * A store as openStateStore made it, told apart by `kind`: the Redis one also runs scripts of its own (the store's
 * epoch, the postback inbox) and holds the records' MAC keys, which a check of `kind` reaches without a cast.
 */
export type OpenedStore = MemoryStateStore | RedisStateStore;

/** The store the settings ask for (SIDECAR_STATE_STORE): memory for one pod, Redis for a fleet. */
export async function openStateStore(config: Config, deps: StoreDeps = {}): Promise<OpenedStore> {
  const { state } = config;
  const { metrics } = deps;
  if (state.redis === undefined) {
    metrics?.available(true);
    const store = new MemoryStateStore({
      maxEntries: state.memoryMaxEntries,
      maxBytes: state.memoryMaxBytes,
      onEvict: () => metrics?.evicted(),
    });
    metrics?.watchMemoryStore(() => store.usage());
    return store;
  }
  metrics?.available(false);
  metrics?.redisCommandsAtZero();
  // The Redis client is loaded only when the settings ask for Redis: a pod on the memory store does not carry it.
  const { RedisStateStore } = await import('./redis-store.js');
  const { log } = deps;
  const mac = state.redis.recordMac;
  const store = new RedisStateStore({
    ...redisStoreOptions(config, state.redis),
    ...(log !== undefined ? { log } : {}),
    ...(metrics !== undefined ? { onCommand: metrics.command.bind(metrics) } : {}),
    ...(mac.keyFile === undefined
      ? {}
      : {
          recordMac: {
            keys: mac.keys,
            acceptUnsigned: mac.acceptUnsigned,
            onRejected: refusedRecordReport(metrics, log),
          },
        }),
  });
  if (metrics !== undefined) store.onAvailabilityChange((available) => metrics.available(available));
  await store.whenAvailable(FIRST_CONNECT_WAIT_MS, true);
  return store;
}
