import type { ClockCorrection } from '../signing/clock-correction.js';
import type { SidecarMetrics } from '../observability/metrics.js';
import { causeFamily, type Forwarder } from '../upstream/forwarder.js';

/**
 * The forwarder, with every gateway answer's Date header measured: token answers too, so that the first
 * payment after start is already signed with the corrected time.
 */
export function measuringGatewayClock(forwarder: Forwarder, clock: ClockCorrection, now: () => number): Forwarder {
  return {
    send: async (request) => {
      const outcome = await forwarder.send(request);
      if (outcome.kind === 'response') clock.observe(outcome.response.headers.date, now());
      return outcome;
    },
    close: () => forwarder.close(),
    destroy: () => forwarder.destroy(),
  };
}

/** The forwarder, with every failed send counted by the hop that failed (signing_sidecar_upstream_failures_total). */
export function countingUpstreamFailures(
  forwarder: Forwarder,
  metrics: Pick<SidecarMetrics, 'upstreamFailure'>,
): Forwarder {
  return {
    send: async (request) => {
      const outcome = await forwarder.send(request);
      if (outcome.kind !== 'response') metrics.upstreamFailure(causeFamily(outcome.error), outcome.kind);
      return outcome;
    },
    close: () => forwarder.close(),
    destroy: () => forwarder.destroy(),
  };
}
