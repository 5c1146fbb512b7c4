// The postbacks subsystem at start (docs/postbacks.md): the delivery the settings ask for, built once, and the
// receiver that hands it what it verifies, on a listener of its own (its own connection cap and timeouts: readiness
// and the egress path do not depend on it). Both are loaded only when the receiver is on: a pod that receives no
// postbacks does not carry their code.
import type { KeyObject } from 'node:crypto';
import type { Config } from '../config/config.js';
import type { Logger } from '../observability/log.js';
import type { SidecarMetrics } from '../observability/metrics.js';
import type { Tracing } from '../observability/tracing.js';
import type { RedisStateStore } from '../state/redis-store.js';
import type { StateStore } from '../state/state-store.js';
import type { StoreEpoch } from '../state/store-epoch.js';

export interface Postbacks {
  /** Installs the keys of a rotated SIDECAR_POSTBACK_PUBLIC_KEY_FILE: the next postback is verified with them. */
  replaceKeys(keys: readonly KeyObject[]): void;
  /** Installs a rotated SIDECAR_POSTBACK_FORWARD_SECRET_FILE: the next attempt to the application is signed with it. */
  replaceForwardSecret(secret: KeyObject): void;
  /** Listens, then starts the delivery (its worker, then its requeue memory); resolves with the receiver's URL. */
  start(): Promise<string>;
  /**
   * Takes no new postback from the inbox and stops accepting; the postbacks in flight, received or being delivered,
   * get `maxMs`; the rest are answered 503 (redelivered) or left pending in the inbox (another replica takes them
   * over). Resolves once the listener and the connections to the application are closed.
   */
  close(maxMs: number): Promise<void>;
  /** Stops the requeue memory's lookups and appends. */
  stop(): void;
}

/** Undefined when the receiver is off (SIDECAR_POSTBACK_FORWARD_URL not set). */
export async function createPostbacks(
  config: Config,
  deps: {
    /** The store every caller uses: the replay memory's. */
    readonly store: StateStore;
    /** The Redis store as opened (the inbox's scripts); undefined on the memory store. */
    readonly redis: RedisStateStore | undefined;
    readonly epoch: StoreEpoch | undefined;
    readonly metrics: SidecarMetrics;
    readonly log: Logger;
    readonly now: () => number;
    readonly tracing: Tracing;
    /** True past the memory high-water mark (memory/pressure.ts): postbacks are answered 503 (redelivered). */
    readonly overloaded: () => boolean;
  },
): Promise<Postbacks | undefined> {
  const settings = config.postback;
  if (settings === undefined) return undefined;
  const { metrics, log, now, tracing } = deps;
  const [{ createPostbackDelivery }, { createPostbackReceiver }] = await Promise.all([
    import('../postback/delivery.js'),
    import('../postback/receiver.js'),
  ]);
  const delivery = await createPostbackDelivery(settings, {
    redis: deps.redis,
    epoch: deps.epoch,
    metrics: metrics.postbacks,
    inboxMetrics: metrics.inbox,
    log,
    nowMs: now,
    tracing,
  });
  const receiver = createPostbackReceiver(settings, {
    store: deps.store,
    sink: delivery.sink,
    metrics: metrics.postbacks,
    log,
    nowMs: now,
    storeCommandTimeoutMs: config.state.redis?.commandTimeoutMs ?? 0,
    bodyPoolBytes: config.memory.postbackBodyPoolBytes,
    overloaded: deps.overloaded,
    onShed: () => metrics.memory.requestShed('postback'),
    onRefused: (reason) => metrics.memory.connectionRefused('postback', reason),
    tracing,
    continueSenderTrace: config.tracing.propagateUpstream,
  });
  return {
    replaceKeys: (keys) => receiver.replaceKeys(keys),
    replaceForwardSecret: (secret) => delivery.replaceForwardSecret(secret),
    async start() {
      const url = await receiver.start();
      delivery.start();
      return url;
    },
    async close(maxMs) {
      // Takes no new postback from the inbox at once; those in flight get the same delay as the open answers.
      const delivered = delivery.drain(maxMs);
      await receiver.close(maxMs);
      // Postbacks not delivered by then stay pending in the inbox; another replica takes them over.
      await delivered;
      await delivery.close();
    },
    stop: () => delivery.stop(),
  };
}
