// `queued` delivery: each replica reads the inbox as one consumer of the group and delivers the postbacks to the
// application, at most `concurrency` at once. A 2xx within SIDECAR_POSTBACK_FORWARD_TIMEOUT_MS ends a postback;
// anything else waits in the retry set for its next attempt (the schedule, or a longer Retry-After), and after the
// last one goes to the dead letters.
import { randomUUID } from 'node:crypto';
import type { Logger } from '../observability/log.js';
import type { InboxMetrics } from '../observability/postback-metrics.js';
import type { TraceSpan, Tracing } from '../observability/tracing.js';
import type { ApplicationAnswer, ApplicationClient } from './application-client.js';
import type { PostbackInbox, DeliveryOutcome, TakenPostback } from './inbox.js';

/** How often an idle worker looks for new postbacks and due retries. */
const POLL_MS = 100;
/** How often the backlog gauges are read from Redis (one script; every replica reads the same figures). */
const STATUS_MS = 5_000;
/** The waits before each new try to record a delivery's outcome while Redis does not answer. */
const RECORD_RETRY_WAITS_MS = [100, 500, 1_000, 2_000];
/** Most due retries moved back into the stream per poll. */
const RELEASE_BATCH = 100;

export interface DeliveryWorkerOptions {
  readonly inbox: PostbackInbox;
  readonly application: ApplicationClient;
  readonly concurrency: number;
  /** The delay before each attempt, in ms: attempt n+1 waits scheduleMs[n] after attempt n failed. */
  readonly scheduleMs: readonly number[];
  readonly visibilityTimeoutMs: number;
  readonly metrics: InboxMetrics;
  readonly log: Logger;
  readonly nowMs: () => number;
  readonly pollMs?: number;
  /** A client span per attempt, in the arrival's trace (the traceparent kept with the postback). */
  readonly tracing?: Tracing;
}

/** What became of one attempt: the `outcome` of its log line and of its span. */
type AttemptOutcome = 'delivered' | 'retry' | 'dead_letter' | 'not_recorded' | 'settled_elsewhere' | 'left_pending';

/** The attempt's answer and outcome; anything but a 2xx is an error, with the status or the cause as its code. */
function endAttemptSpan(span: TraceSpan, answer: ApplicationAnswer | undefined, outcome: AttemptOutcome): void {
  span.setAttributes({
    'http.response.status_code': answer?.status,
    'sidecar.cause_code': answer?.failure,
    'sidecar.postback.delivery_outcome': outcome,
  });
  const status = answer?.status;
  if (status === undefined || status < 200 || status >= 300)
    span.fail(answer?.failure ?? (status === undefined ? 'error' : String(status)));
  span.end();
}

export interface DeliveryWorker {
  /** This process' consumer name in the group. */
  readonly consumer: string;
  start(): void;
  /**
   * Takes nothing more and lets the deliveries in flight finish within `maxMs`; those still running then are
   * aborted and left pending, to be taken over by another replica after the visibility timeout.
   */
  stop(maxMs: number): Promise<void>;
}

/**
 * Each delay of the schedule is spread by up to this share either way, so that the postbacks that failed together
 * (an application that was down) are not all retried in the same instant.
 */
export const RETRY_JITTER = 0.1;

/**
 * What an attempt's answer makes of the postback: delivered, retried at a time, or dead. `random` in [0, 1) places
 * the retry within the jitter (a Retry-After is a floor, never shortened).
 */
export function deliveryOutcomeOf(
  attempt: number,
  answer: {
    readonly status: number | undefined;
    readonly failure: string | undefined;
    readonly retryAfterSeconds?: number | undefined;
  },
  scheduleMs: readonly number[],
  nowMs: number,
  random: number,
): DeliveryOutcome {
  const { status } = answer;
  if (status !== undefined && status >= 200 && status < 300) return { outcome: 'delivered' };
  const error = status === undefined ? (answer.failure ?? 'error') : `status ${status}`;
  const next = scheduleMs[attempt];
  if (next === undefined) return { outcome: 'dead', error };
  const spread = next * (1 + RETRY_JITTER * (2 * random - 1));
  return {
    outcome: 'retry',
    dueMs: nowMs + Math.round(Math.max(spread, (answer.retryAfterSeconds ?? 0) * 1000)),
    error,
  };
}

export function createDeliveryWorker(options: DeliveryWorkerOptions): DeliveryWorker {
  const { inbox, application, log, metrics } = options;
  // A random name per process: a restarted pod's pending postbacks are another consumer's, taken over by XAUTOCLAIM.
  const consumer = `sidecar-${randomUUID()}`;
  /** The deliveries running, by stream entry id. */
  const inFlight = new Map<string, Promise<void>>();
  /**
   * This consumer's own pending postbacks are to be looked at again: a read failed (its postbacks may have been
   * given to this consumer all the same), or Redis did not answer, which a failover does; it takes back writes no
   * replica had yet, so a postback recorded for a retry can be this consumer's pending one again, unknown to it.
   */
  let lostRead = false;
  // Draining: no new postbacks are taken. Stopping: the deliveries still running are abandoned.
  let draining = false;
  const stopping = new AbortController();
  let prepared = false;
  let loop: Promise<void> | undefined;
  let wake: (() => void) | undefined;
  let lastClaimMs = 0;
  let lastStatusMs = Number.NEGATIVE_INFINITY;
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

  async function deliver(postback: TakenPostback): Promise<void> {
    const span = attemptSpan(postback);
    let outcome: AttemptOutcome = 'left_pending';
    let answer: ApplicationAnswer | undefined;
    try {
      answer = await attempt(postback, span);
      outcome = await recordAnswer(postback, answer);
    } finally {
      if (span !== undefined) endAttemptSpan(span, answer, outcome);
    }
  }

  /**
   * The attempt's span, a child of the arrival's (whose traceparent was kept with the postback): every attempt,
   * its answer and its retry show in the arrival's trace, however late and on whichever replica. The postback's
   * own `traceparent` is replaced by the attempt's, so that the application's spans sit under the attempt.
   */
  function attemptSpan(postback: TakenPostback): TraceSpan | undefined {
    const { tracing } = options;
    if (tracing?.enabled !== true) return undefined;
    const arrival = tracing.extract(postback.headers.traceparent, postback.headers.tracestate);
    return tracing.startSpan('postback delivery', 'client', arrival, {
      'sidecar.postback.id': postback.id,
      'sidecar.postback.attempt': postback.attempt,
    });
  }

  async function attempt(postback: TakenPostback, span: TraceSpan | undefined): Promise<ApplicationAnswer> {
    const traceHeaders = span?.context === undefined ? {} : options.tracing?.headers(span.context);
    const headers = { ...postback.headers, ...traceHeaders, 'x-postback-attempt': String(postback.attempt) };
    return application.post(postback.id, postback.payload, headers, stopping.signal);
  }

  async function recordAnswer(postback: TakenPostback, answer: ApplicationAnswer): Promise<AttemptOutcome> {
    const fields = {
      event: 'postback.delivery',
      postbackId: postback.id,
      attempt: postback.attempt,
      status: answer.status,
    };
    // Stopped mid-delivery: nothing is recorded; the postback stays pending and another replica delivers it.
    if (stopping.signal.aborted && answer.status === undefined) {
      log.info({ ...fields, outcome: 'left_pending' }, 'delivery left to another replica');
      return 'left_pending';
    }
    const deliveryOutcome = deliveryOutcomeOf(
      postback.attempt,
      answer,
      options.scheduleMs,
      options.nowMs(),
      Math.random(),
    );
    const recorded = await recordSoon(postback, deliveryOutcome);
    if (recorded === undefined) {
      // Left pending: after the visibility timeout a replica takes it over and delivers it again.
      metrics.delivery('not_recorded');
      log.warn({ ...fields, outcome: 'not_recorded' }, 'delivery outcome not recorded');
      return 'not_recorded';
    }
    if (!recorded) {
      // Another replica took it over (this one stalled past the visibility timeout) and recorded its outcome first.
      log.info({ ...fields, outcome: 'settled_elsewhere' }, 'delivery outcome already recorded by another replica');
      return 'settled_elsewhere';
    }
    metrics.delivery(deliveryOutcome.outcome === 'dead' ? 'dead_letter' : deliveryOutcome.outcome);
    if (deliveryOutcome.outcome === 'delivered') {
      log.info({ ...fields, outcome: 'delivered' }, 'postback delivered');
      return 'delivered';
    }
    if (deliveryOutcome.outcome === 'dead') {
      log.error(
        { ...fields, outcome: 'dead_letter', failure: deliveryOutcome.error },
        'postback moved to the dead letters',
      );
      return 'dead_letter';
    }
    const inMs = deliveryOutcome.dueMs - options.nowMs();
    log.warn({ ...fields, outcome: 'retry', failure: deliveryOutcome.error, nextAttemptInMs: inMs }, 'postback retry');
    return 'retry';
  }

  /**
   * Records the outcome, trying again over a few seconds when Redis does not answer: recording is safe to repeat
   * (one that took effect already answers false), and an unrecorded delivery would be made again.
   */
  async function recordSoon(postback: TakenPostback, deliveryOutcome: DeliveryOutcome): Promise<boolean | undefined> {
    for (let tries = 0; ; tries++) {
      try {
        return await inbox.record(postback, deliveryOutcome, options.nowMs());
      } catch {
        const waitMs = RECORD_RETRY_WAITS_MS[tries];
        if (waitMs === undefined || stopping.signal.aborted) return undefined;
        await new Promise((resolve) => setTimeout(resolve, waitMs));
      }
    }
  }

  function launch(postback: TakenPostback): void {
    const running = deliver(postback).finally(() => {
      inFlight.delete(postback.streamId);
      wake?.();
    });
    inFlight.set(postback.streamId, running);
  }

  async function poll(): Promise<void> {
    if (!prepared) {
      await inbox.prepare();
      prepared = true;
    }
    const now = options.nowMs();
    if (now - lastStatusMs >= STATUS_MS) {
      lastStatusMs = now;
      metrics.inboxStatus(await inbox.status());
    }
    await inbox.releaseDue(now, RELEASE_BATCH);
    let free = options.concurrency - inFlight.size;
    // Abandoned postbacks are looked for now and then: they are at least a visibility timeout old.
    if (free > 0 && now - lastClaimMs >= Math.min(options.visibilityTimeoutMs / 2, 5_000)) {
      lastClaimMs = now;
      for (const postback of await inbox.claimStale(consumer, options.visibilityTimeoutMs, free, now)) {
        launch(postback);
        free--;
      }
    }
    if (free <= 0 || draining) return;
    if (lostRead) {
      const delivering = new Set(inFlight.keys());
      for (const postback of await inbox.recover(consumer, free, options.nowMs(), delivering)) {
        launch(postback);
        free--;
      }
      lostRead = false;
    }
    if (free <= 0) return;
    lostRead = true;
    const taken = await inbox.read(consumer, free, options.nowMs());
    lostRead = false;
    for (const postback of taken) launch(postback);
  }

  async function run(): Promise<void> {
    while (!draining) {
      try {
        await poll();
        lastFailure = undefined;
      } catch (err) {
        const reason = err instanceof Error ? err.message : 'error';
        // A Redis that restarted empty has no group any more (NOGROUP): created again at the next poll.
        prepared = false;
        lostRead = true;
        if (reason !== lastFailure) log.warn({ event: 'postback.inbox_unavailable', err: reason }, 'inbox unavailable');
        lastFailure = reason;
      }
      if (!draining) await nap(options.pollMs ?? POLL_MS);
    }
  }

  return {
    consumer,
    start() {
      loop ??= run();
    },
    async stop(maxMs) {
      draining = true;
      wake?.();
      await loop;
      let timer: NodeJS.Timeout | undefined;
      const deadline = new Promise<void>((resolve) => (timer = setTimeout(resolve, maxMs)));
      await Promise.race([Promise.all(inFlight.values()), deadline]);
      clearTimeout(timer);
      stopping.abort();
      await Promise.all(inFlight.values());
    },
  };
}
