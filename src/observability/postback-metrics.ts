import { Counter, Gauge, Histogram, type Registry } from 'prom-client';
import {
  DELIVERY_OUTCOMES,
  METRICS,
  POSTBACK_OUTCOMES,
  type DeliveryOutcomeLabel,
  type PostbackOutcome,
} from './metric-names.js';

// From 5 ms to the default delivery timeout (SIDECAR_POSTBACK_FORWARD_TIMEOUT_MS, 10 s) and past it: an application
// answers in milliseconds, a struggling one in seconds.
const FORWARD_BUCKETS = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30];

/**
 * The postback receiver's metrics, on the sidecar's registry and created with it (at zero, receiver on or off),
 * so that the alerts see the first forged signature and the first failed delivery.
 */
export class PostbackMetrics {
  private readonly outcomes: Counter<'outcome'>;
  private readonly forwardLatency: Histogram;

  constructor(registry: Registry) {
    this.outcomes = new Counter({
      name: METRICS.postbacks,
      help: 'Postbacks received, by outcome (forwarded, duplicate, the refusals, forward_failed, ...).',
      labelNames: ['outcome'] as const,
      registers: [registry],
    });
    this.forwardLatency = new Histogram({
      name: METRICS.postbackForwardDuration,
      help: 'One direct delivery of a verified postback to the application, until its answer, failure or timeout.',
      buckets: FORWARD_BUCKETS,
      registers: [registry],
    });
    for (const outcome of POSTBACK_OUTCOMES) this.outcomes.inc({ outcome }, 0);
  }

  postback(outcome: PostbackOutcome): void {
    this.outcomes.inc({ outcome });
  }

  forwarded(seconds: number): void {
    this.forwardLatency.observe(seconds);
  }
}

/** The inbox's figures as one replica last read them. */
export interface InboxFigures {
  readonly undelivered: number;
  readonly oldestReceivedMs: number | undefined;
  readonly dead: number;
}

/**
 * Queued delivery's metrics, created at zero with the registry whatever the mode (the alerts need the series). The
 * backlog figures are the account's, read from Redis by every replica: the alerts take their max. The oldest
 * postback's age is computed at each scrape from its arrival, so it grows between two reads.
 */
export class InboxMetrics {
  private readonly deliveries: Counter<'outcome'>;
  private readonly requeues: Counter;
  private readonly requeueDrops: Counter;
  private figures: InboxFigures = { undelivered: 0, oldestReceivedMs: undefined, dead: 0 };

  constructor(registry: Registry, nowMs: () => number = Date.now) {
    this.deliveries = new Counter({
      name: METRICS.postbackDeliveries,
      help: 'Queued postback delivery attempts, by outcome (delivered, retry, dead_letter, not_recorded).',
      labelNames: ['outcome'] as const,
      registers: [registry],
    });
    for (const outcome of DELIVERY_OUTCOMES) this.deliveries.inc({ outcome }, 0);
    this.requeues = new Counter({
      name: METRICS.postbackRequeued,
      help: 'Postbacks this replica accepted, appended to the inbox again after Redis lost its dataset.',
      registers: [registry],
    });
    this.requeueDrops = new Counter({
      name: METRICS.postbackRequeueDropped,
      help: 'Accepted postbacks no longer held for a wipe (oldest first), to stay within the requeue memory.',
      registers: [registry],
    });
    const undelivered: Gauge = new Gauge({
      name: METRICS.postbackInboxUndelivered,
      help: 'Queued postbacks not yet delivered (dead letters excluded).',
      registers: [registry],
      collect: () => undelivered.set(this.figures.undelivered),
    });
    const oldestAge: Gauge = new Gauge({
      name: METRICS.postbackInboxOldestAge,
      help: 'Age in seconds of the oldest undelivered queued postback; 0 when there is none.',
      registers: [registry],
      collect: () => {
        const oldest = this.figures.oldestReceivedMs;
        oldestAge.set(oldest === undefined ? 0 : Math.max(0, nowMs() - oldest) / 1000);
      },
    });
    const dead: Gauge = new Gauge({
      name: METRICS.postbackDeadLetters,
      help: 'Queued postbacks in the dead letters, until replayed or dropped.',
      registers: [registry],
      collect: () => dead.set(this.figures.dead),
    });
  }

  delivery(outcome: DeliveryOutcomeLabel): void {
    this.deliveries.inc({ outcome });
  }

  requeued(count: number): void {
    this.requeues.inc(count);
  }

  requeueDropped(count: number): void {
    this.requeueDrops.inc(count);
  }

  inboxStatus(figures: InboxFigures): void {
    this.figures = figures;
  }
}
