// Postback delivery (docs/postbacks.md), decided once here from SIDECAR_POSTBACK_DELIVERY: `direct`, each verified
// postback delivered to the application within the receiver's request; `queued`, kept in the inbox on Redis and
// delivered by the worker. With a requeue memory (SIDECAR_POSTBACK_REQUEUE_MEMORY_MB), what this replica accepts is
// also held until delivered and appended again if Redis loses it (docs/fleet.md). The receiver only hands postbacks
// to the sink; everything that delivers them, and its life, is here.
import type { KeyObject } from 'node:crypto';
import type { PostbackConfig } from '../config/postback-settings.js';
import type { Logger } from '../observability/log.js';
import type { InboxMetrics, PostbackMetrics } from '../observability/postback-metrics.js';
import type { Tracing } from '../observability/tracing.js';
import type { RedisStateStore } from '../state/redis-store.js';
import type { StoreEpoch } from '../state/store-epoch.js';
import { createApplicationClient, type ApplicationClient } from './application-client.js';
import { DeliverySigner } from './delivery-signing.js';
import { DeliveryWorker } from './delivery-worker.js';
import { RedisInbox, type PostbackInbox } from './inbox.js';
import type { RequeueMemory } from './requeue-memory.js';
import { directSink, inboxSink, type PostbackSink } from './sink.js';

export interface PostbackDeliveryDeps {
  /** The Redis store as opened (the inbox runs scripts of its own); undefined on the memory store. */
  readonly redis: RedisStateStore | undefined;
  /** Redis's epoch (state/store-epoch.ts): the requeue memory appends again what a wipe lost. */
  readonly epoch: StoreEpoch | undefined;
  /** `direct`: deliveries counted with the receiver's metrics. */
  readonly metrics: PostbackMetrics;
  /** `queued`: the inbox's. */
  readonly inboxMetrics: InboxMetrics;
  readonly log: Logger;
  readonly nowMs?: () => number;
  /** A span per delivery to the application, under the arrival's (docs/operations.md#tracing). */
  readonly tracing?: Tracing;
}

/** The delivery the settings ask for, built once: its sink, and for `queued` its worker and requeue memory. */
export interface PostbackDelivery {
  /** Where the receiver hands each verified postback. */
  readonly sink: PostbackSink;
  /** `queued`: delivers the postbacks from the inbox. */
  readonly worker: DeliveryWorker | undefined;
  /** `queued` with SIDECAR_POSTBACK_REQUEUE_MEMORY_MB (and the store's epoch): what this replica accepted, held. */
  readonly requeue: RequeueMemory | undefined;
  /** Installs a rotated SIDECAR_POSTBACK_FORWARD_SECRET_FILE: the next attempt to the application is signed with it. */
  replaceForwardSecret(secret: KeyObject): void;
  /** Starts the worker, then the requeue memory's lookups. */
  start(): void;
  /**
   * The worker takes nothing more from the inbox at once; its deliveries in flight get `maxMs`, then are aborted and
   * left pending, to be taken over by another replica.
   */
  drain(maxMs: number): Promise<void>;
  /** Closes the connections to the application: once the worker has drained and the receiver has closed. */
  close(): Promise<void>;
  /** Stops the requeue memory's lookups and appends. */
  stop(): void;
}

export async function createPostbackDelivery(
  config: PostbackConfig,
  deps: PostbackDeliveryDeps,
): Promise<PostbackDelivery> {
  const nowMs = deps.nowMs ?? Date.now;
  const signer = config.forwardSecret === undefined ? undefined : new DeliverySigner(config.forwardSecret, nowMs);
  const application = createApplicationClient(config.forwardUrl, config.forwardTimeoutMs, signer);
  const { sink, worker, requeue } = await deliveryFor(config, deps, application, nowMs);
  return {
    sink,
    worker,
    requeue,
    replaceForwardSecret: (secret) => application.replaceSecret(secret),
    start() {
      worker?.start();
      requeue?.start();
    },
    drain: async (maxMs) => worker?.stop(maxMs),
    close: () => application.close(),
    stop: () => requeue?.stop(),
  };
}

interface Built {
  readonly sink: PostbackSink;
  readonly worker: DeliveryWorker | undefined;
  readonly requeue: RequeueMemory | undefined;
}

/** The one place `direct` and `queued` part. */
async function deliveryFor(
  config: PostbackConfig,
  deps: PostbackDeliveryDeps,
  application: ApplicationClient,
  nowMs: () => number,
): Promise<Built> {
  const { tracing } = deps;
  if (config.delivery === 'direct') {
    return { sink: directSink({ application, metrics: deps.metrics, tracing }), worker: undefined, requeue: undefined };
  }
  // The settings refuse `queued` without SIDECAR_STATE_STORE=redis (postback-settings.ts): this is a Redis store.
  const { redis } = deps;
  if (redis === undefined) throw new Error('queued postback delivery needs the Redis state store');
  const { inbox, requeue } = await inboxFor(config, redis, deps);
  const sink = inboxSink({ inbox, orderField: config.orderField, nowMs, tracing });
  const worker = new DeliveryWorker({
    inbox,
    metrics: deps.inboxMetrics,
    application,
    concurrency: config.deliveryConcurrency,
    scheduleMs: config.retryScheduleMs,
    visibilityTimeoutMs: config.visibilityTimeoutMs,
    log: deps.log,
    nowMs,
    ...(tracing === undefined ? {} : { tracing }),
  });
  return { sink, worker, requeue };
}

/**
 * The inbox on Redis, held by the requeue memory too when one is on. The requeue memory is loaded only then: a pod
 * without one does not carry its code.
 */
async function inboxFor(
  config: PostbackConfig,
  redis: RedisStateStore,
  deps: PostbackDeliveryDeps,
): Promise<{ readonly inbox: PostbackInbox; readonly requeue: RequeueMemory | undefined }> {
  const inbox = new RedisInbox(redis);
  if (deps.epoch === undefined || config.requeueMemoryMb === 0) return { inbox, requeue: undefined };
  const { RequeueMemory } = await import('./requeue-memory.js');
  const maxBytes = config.requeueMemoryMb * 1024 * 1024;
  const requeue = new RequeueMemory(inbox, redis, deps.epoch, { maxBytes, metrics: deps.inboxMetrics, log: deps.log });
  return { inbox: requeue.wrap(), requeue };
}
