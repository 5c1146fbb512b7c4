import { Counter, Histogram, type Registry } from 'prom-client';
import { METRICS, POSTBACK_OUTCOMES, type PostbackOutcome } from './metric-names.js';

// From 5 ms to the default forward timeout (10 s) and past it: an internal webhook answers in milliseconds, a
// struggling one in seconds.
const FORWARD_BUCKETS = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30];

/**
 * The postback receiver's metrics, on the sidecar's registry and created with it (at zero, receiver on or off),
 * so that the alerts see the first forged signature and the first failed forward.
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
      help: 'One forward of a verified postback to the internal service, until its answer, failure or timeout.',
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
