import type { IncomingMessage } from 'node:http';
import type { TraceSpan, Tracing } from '../observability/tracing.js';
import type { RequestOutcome } from './request-log.js';

/**
 * The request's server span, continuing the caller's traceparent when it sent one. Its attributes are the log
 * line's labels: the route, the request id, and at the end the outcome. Never the payload, a header value other
 * than the request id, nor the Idempotency-Key.
 */
export function startServerSpan(tracing: Tracing, req: IncomingMessage, route: string, id: string): TraceSpan {
  const parent = tracing.extract(req.headers.traceparent, req.headers.tracestate);
  // Bounded names: any method other than POST is refused, and only its class matters.
  const method = req.method === 'POST' ? 'POST' : '_OTHER';
  return tracing.startSpan(`${method} ${route}`, 'server', parent, {
    'http.request.method': method,
    'http.route': route,
    'sidecar.request_id': id,
  });
}

/** What happened to the request's Idempotency-Key, as the span reports it. */
export interface KeyState {
  /** The request carried a valid key. */
  readonly hasKey: boolean;
  /** The key was claimed for this request (it was to be sent). */
  readonly claimed: boolean;
}

const IDEMPOTENCY_CODE = 'sidecar.idempotency.';

function idempotencyOutcome(key: KeyState, outcome: RequestOutcome): string {
  if (outcome.causeCode === 'ERR_IDEMPOTENCY_ABANDONED') return 'abandoned';
  if (outcome.replayed === true) return 'replayed';
  if (key.claimed) return 'new';
  // Refused for its key: in_progress, key_reused, unavailable, key_invalid, key_required, record_unverified.
  if (outcome.code.startsWith(IDEMPOTENCY_CODE)) return outcome.code.slice(IDEMPOTENCY_CODE.length);
  return key.hasKey ? 'unclaimed' : 'none';
}

/** Ends the server span with the request's outcome (the same as its log line's); a 5xx is an error span. */
export function endServerSpan(span: TraceSpan, outcome: RequestOutcome, key: KeyState): void {
  span.setAttributes({
    'http.response.status_code': outcome.status,
    'sidecar.code': outcome.code,
    'sidecar.attempts': outcome.attempts,
    'sidecar.cause_code': outcome.causeCode,
    'sidecar.gateway_code': outcome.gatewayCode,
    'sidecar.idempotency': idempotencyOutcome(key, outcome),
    'sidecar.late_status': outcome.late?.status,
    'sidecar.late_code': outcome.late?.code,
    'sidecar.delivered': outcome.delivered,
  });
  if (outcome.status >= 500) span.fail(outcome.code);
  span.end();
}
