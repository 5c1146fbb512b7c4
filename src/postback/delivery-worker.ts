// `queued` delivery: each replica reads the inbox as one consumer of the group and POSTs the postbacks to the
// internal service, at most `concurrency` at once. A 2xx ends a postback; anything else waits in the retry set for
// its next attempt (the schedule, or a longer Retry-After), and after the last one goes to the dead letters.
import { randomUUID } from 'node:crypto';
import type { Logger } from '../observability/log.js';
import type { PostbackForwarder } from './forward.js';
import type { InboxEntry, PostbackInbox } from './inbox.js';

/** How often an idle worker looks for new entries, due retries and abandoned entries. */
const POLL_MS = 100;
/** Most due retries moved back into the stream per poll. */
const RELEASE_BATCH = 100;

export interface DeliveryWorkerOptions {
  readonly inbox: PostbackInbox;
  readonly forwarder: PostbackForwarder;
  readonly concurrency: number;
  /** The delay before each attempt, in ms: attempt n+1 waits scheduleMs[n] after attempt n failed. */
  readonly scheduleMs: readonly number[];
  readonly visibilityTimeoutMs: number;
  readonly log: Logger;
  readonly nowMs: () => number;
  readonly pollMs?: number;
}

export interface DeliveryWorker {
  /** This process' consumer name in the group. */
  readonly consumer: string;
  start(): void;
  /** Takes nothing more, lets the deliveries in flight finish; what was not taken stays in the inbox. */
  stop(): Promise<void>;
}

export function createDeliveryWorker(options: DeliveryWorkerOptions): DeliveryWorker {
  const { inbox, forwarder, log } = options;
  // A random name per process: a restarted pod's pending entries are another consumer's, taken over by XAUTOCLAIM.
  const consumer = `sidecar-${randomUUID()}`;
  const inFlight = new Set<Promise<void>>();
  // Deliveries are not aborted at shutdown: each is bounded by the forward timeout, and its outcome is recorded.
  const neverAborted = new AbortController().signal;
  let stopped = false;
  let prepared = false;
  let loop: Promise<void> | undefined;
  let wake: (() => void) | undefined;
  let lastClaimMs = 0;
  let lastFailure: string | undefined;

  const nap = (ms: number) =>
    new Promise<void>((resolve) => {
      const timer = setTimeout(done, ms);
      function done() {
        clearTimeout(timer);
        wake = undefined;
        resolve();
      }
      wake = done;
    });

  async function settle(entry: InboxEntry, status: number | undefined, failure: string | undefined, retryAfter = 0) {
    const fields = { event: 'postback.delivery', postbackId: entry.postbackId, attempt: entry.attempt, status };
    if (status !== undefined && status >= 200 && status < 300) {
      await inbox.done(entry);
      log.info({ ...fields, outcome: 'delivered' }, 'postback delivered');
      return;
    }
    const reason = status === undefined ? (failure ?? 'error') : `status ${status}`;
    const next = options.scheduleMs[entry.attempt];
    if (next === undefined) {
      await inbox.deadLetter(entry, reason);
      log.error({ ...fields, outcome: 'dead_letter', failure: reason }, 'postback moved to the dead letters');
      return;
    }
    const dueMs = options.nowMs() + Math.max(next, retryAfter * 1000);
    await inbox.retryAt(entry, dueMs);
    log.warn({ ...fields, outcome: 'retry', failure: reason, nextAttemptInMs: dueMs - options.nowMs() }, 'retry');
  }

  async function deliver(entry: InboxEntry): Promise<void> {
    const headers = {
      ...entry.headers,
      'x-postback-id': entry.postbackId,
      'x-postback-attempt': String(entry.attempt),
    };
    const result = await forwarder.post(entry.payload, headers, neverAborted);
    try {
      await settle(entry, result.status, result.failure, result.retryAfterSeconds);
    } catch (err) {
      // Left pending: after the visibility timeout a replica takes it over and delivers it again.
      log.warn(
        { event: 'postback.delivery', postbackId: entry.postbackId, err: err instanceof Error ? err.name : 'error' },
        'delivery outcome not recorded',
      );
    }
  }

  function launch(entry: InboxEntry): void {
    const running = deliver(entry).finally(() => {
      inFlight.delete(running);
      wake?.();
    });
    inFlight.add(running);
  }

  async function poll(): Promise<void> {
    if (!prepared) {
      await inbox.prepare();
      prepared = true;
    }
    await inbox.releaseDue(options.nowMs(), RELEASE_BATCH);
    let free = options.concurrency - inFlight.size;
    if (free <= 0) return;
    // Abandoned entries are looked for now and then, not at every poll: they are at least a visibility timeout old.
    if (options.nowMs() - lastClaimMs >= Math.min(options.visibilityTimeoutMs / 2, 5_000)) {
      lastClaimMs = options.nowMs();
      for (const entry of await inbox.claimStale(consumer, options.visibilityTimeoutMs, free)) {
        launch(entry);
        free--;
      }
    }
    if (free <= 0 || stopped) return;
    for (const entry of await inbox.read(consumer, free)) launch(entry);
  }

  async function run(): Promise<void> {
    while (!stopped) {
      try {
        await poll();
        lastFailure = undefined;
      } catch (err) {
        const name = err instanceof Error ? err.message : 'error';
        // A Redis that restarted empty has no group any more (NOGROUP): created again at the next poll.
        prepared = false;
        if (name !== lastFailure) log.warn({ event: 'postback.inbox_unavailable', err: name }, 'inbox unavailable');
        lastFailure = name;
      }
      if (!stopped) await nap(options.pollMs ?? POLL_MS);
    }
  }

  return {
    consumer,
    start() {
      loop ??= run();
    },
    async stop() {
      stopped = true;
      wake?.();
      await loop;
      await Promise.all([...inFlight]);
    },
  };
}
