// `queued` delivery: each replica reads the inbox as one consumer of the group and delivers the postbacks to the
// application, at most `concurrency` at once. A 2xx within SIDECAR_POSTBACK_FORWARD_TIMEOUT_MS ends a postback;
// anything else waits in the retry set for its next attempt (the schedule, or a longer Retry-After), and after the
// last one goes to the dead letters.
import { randomUUID } from 'node:crypto';
import type { Logger } from '../observability/log.js';
import type { InboxMetrics } from '../observability/postback-metrics.js';
import type { TraceSpan, Tracing } from '../observability/tracing.js';
import { isSuccessStatus } from '../upstream/http-status.js';
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
  if (!isSuccessStatus(status)) span.fail(answer?.failure ?? (status === undefined ? 'error' : String(status)));
  span.end();
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
  if (isSuccessStatus(status)) return { outcome: 'delivered' };
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

/** Reads the inbox as one consumer of the group and delivers what it takes, `concurrency` at once. */
export class DeliveryWorker {
  /**
   * This process' consumer name in the group: a random one, so that a restarted pod's pending postbacks are another
   * consumer's, taken over by XAUTOCLAIM.
   */
  readonly consumer = `sidecar-${randomUUID()}`;
  /** The deliveries running, by stream entry id. */
  private readonly inFlight = new Map<string, Promise<void>>();
  /**
   * This consumer's own pending postbacks are to be looked at again: a read failed (its postbacks may have been
   * given to this consumer all the same), or Redis did not answer, which a failover does; it takes back writes no
   * replica had yet, so a postback recorded for a retry can be this consumer's pending one again, unknown to it.
   */
  private lostRead = false;
  /** No new postbacks are taken. */
  private draining = false;
  /** Aborted: the deliveries still running are abandoned. */
  private readonly stopping = new AbortController();
  private prepared = false;
  private loop: Promise<void> | undefined;
  /** Ends the poll loop's nap early (a delivery done, a stop). */
  private wake: (() => void) | undefined;
  private lastClaimMs = 0;
  private lastStatusMs = Number.NEGATIVE_INFINITY;
  private lastFailure: string | undefined;

  constructor(private readonly options: DeliveryWorkerOptions) {}

  start(): void {
    this.loop ??= this.run();
  }

  /**
   * Takes nothing more and lets the deliveries in flight finish within `maxMs`; those still running then are
   * aborted and left pending, to be taken over by another replica after the visibility timeout.
   */
  async stop(maxMs: number): Promise<void> {
    this.draining = true;
    this.wake?.();
    await this.loop;
    let timer: NodeJS.Timeout | undefined;
    const deadline = new Promise<void>((resolve) => (timer = setTimeout(resolve, maxMs)));
    await Promise.race([Promise.all(this.inFlight.values()), deadline]);
    clearTimeout(timer);
    this.stopping.abort();
    await Promise.all(this.inFlight.values());
  }

  private nap(ms: number): Promise<void> {
    return new Promise<void>((resolve) => {
      const done = (): void => {
        clearTimeout(timer);
        this.wake = undefined;
        resolve();
      };
      const timer = setTimeout(done, ms);
      this.wake = done;
    });
  }

  private async deliver(postback: TakenPostback): Promise<void> {
    const span = this.attemptSpan(postback);
    let outcome: AttemptOutcome = 'left_pending';
    let answer: ApplicationAnswer | undefined;
    try {
      answer = await this.attempt(postback, span);
      outcome = await this.recordAnswer(postback, answer);
    } finally {
      if (span !== undefined) endAttemptSpan(span, answer, outcome);
    }
  }

  /**
   * The attempt's span, a child of the arrival's (whose traceparent was kept with the postback): every attempt,
   * its answer and its retry show in the arrival's trace, however late and on whichever replica. The postback's
   * own `traceparent` is replaced by the attempt's, so that the application's spans sit under the attempt.
   */
  private attemptSpan(postback: TakenPostback): TraceSpan | undefined {
    const { tracing } = this.options;
    if (tracing?.enabled !== true) return undefined;
    const arrival = tracing.extract(postback.headers.traceparent, postback.headers.tracestate);
    return tracing.startSpan('postback delivery', 'client', arrival, {
      'sidecar.postback.id': postback.id,
      'sidecar.postback.attempt': postback.attempt,
    });
  }

  private async attempt(postback: TakenPostback, span: TraceSpan | undefined): Promise<ApplicationAnswer> {
    const traceHeaders = span?.context === undefined ? {} : this.options.tracing?.headers(span.context);
    const headers = { ...postback.headers, ...traceHeaders, 'x-postback-attempt': String(postback.attempt) };
    return this.options.application.post(postback.id, postback.payload, headers, this.stopping.signal);
  }

  private async recordAnswer(postback: TakenPostback, answer: ApplicationAnswer): Promise<AttemptOutcome> {
    const { log, metrics, nowMs } = this.options;
    const fields = {
      event: 'postback.delivery',
      postbackId: postback.id,
      attempt: postback.attempt,
      status: answer.status,
    };
    // Stopped mid-delivery: nothing is recorded; the postback stays pending and another replica delivers it.
    if (this.stopping.signal.aborted && answer.status === undefined) {
      log.info({ ...fields, outcome: 'left_pending' }, 'delivery left to another replica');
      return 'left_pending';
    }
    const deliveryOutcome = deliveryOutcomeOf(
      postback.attempt,
      answer,
      this.options.scheduleMs,
      nowMs(),
      Math.random(),
    );
    const recorded = await this.recordSoon(postback, deliveryOutcome);
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
    const inMs = deliveryOutcome.dueMs - nowMs();
    log.warn({ ...fields, outcome: 'retry', failure: deliveryOutcome.error, nextAttemptInMs: inMs }, 'postback retry');
    return 'retry';
  }

  /**
   * Records the outcome, trying again over a few seconds when Redis does not answer: recording is safe to repeat
   * (one that took effect already answers false), and an unrecorded delivery would be made again.
   */
  private async recordSoon(postback: TakenPostback, deliveryOutcome: DeliveryOutcome): Promise<boolean | undefined> {
    for (let tries = 0; ; tries++) {
      try {
        return await this.options.inbox.record(postback, deliveryOutcome, this.options.nowMs());
      } catch {
        const waitMs = RECORD_RETRY_WAITS_MS[tries];
        if (waitMs === undefined || this.stopping.signal.aborted) return undefined;
        await new Promise((resolve) => setTimeout(resolve, waitMs));
      }
    }
  }

  private launch(postback: TakenPostback): void {
    const running = this.deliver(postback).finally(() => {
      this.inFlight.delete(postback.streamId);
      this.wake?.();
    });
    this.inFlight.set(postback.streamId, running);
  }

  private async poll(): Promise<void> {
    const { inbox, metrics, concurrency, visibilityTimeoutMs, nowMs } = this.options;
    if (!this.prepared) {
      await inbox.prepare();
      this.prepared = true;
    }
    const now = nowMs();
    if (now - this.lastStatusMs >= STATUS_MS) {
      this.lastStatusMs = now;
      metrics.inboxStatus(await inbox.status());
    }
    await inbox.releaseDue(now, RELEASE_BATCH);
    let free = concurrency - this.inFlight.size;
    // Abandoned postbacks are looked for now and then: they are at least a visibility timeout old.
    if (free > 0 && now - this.lastClaimMs >= Math.min(visibilityTimeoutMs / 2, 5_000)) {
      this.lastClaimMs = now;
      for (const postback of await inbox.claimStale(this.consumer, visibilityTimeoutMs, free, now)) {
        this.launch(postback);
        free--;
      }
    }
    if (free <= 0 || this.draining) return;
    if (this.lostRead) {
      const delivering = new Set(this.inFlight.keys());
      for (const postback of await inbox.recover(this.consumer, free, nowMs(), delivering)) {
        this.launch(postback);
        free--;
      }
      this.lostRead = false;
    }
    if (free <= 0) return;
    this.lostRead = true;
    const taken = await inbox.read(this.consumer, free, nowMs());
    this.lostRead = false;
    for (const postback of taken) this.launch(postback);
  }

  private async run(): Promise<void> {
    while (!this.draining) {
      try {
        await this.poll();
        this.lastFailure = undefined;
      } catch (err) {
        const reason = err instanceof Error ? err.message : 'error';
        // A Redis that restarted empty has no group any more (NOGROUP): created again at the next poll.
        this.prepared = false;
        this.lostRead = true;
        if (reason !== this.lastFailure) {
          this.options.log.warn({ event: 'postback.inbox_unavailable', err: reason }, 'inbox unavailable');
        }
        this.lastFailure = reason;
      }
      if (!this.draining) await this.nap(this.options.pollMs ?? POLL_MS);
    }
  }
}
