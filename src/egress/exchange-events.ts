import { asSidecarError } from '../errors.js';
import type { SidecarMetrics } from '../observability/metrics.js';
import type { TraceSpan, Tracing } from '../observability/tracing.js';
import type { ClockCorrection } from '../signing/clock-correction.js';
import { isTimestampRefusal } from '../upstream/gateway-answer.js';
import type { SendOutcome } from '../upstream/gateway-send.js';
import { errorCode } from '../upstream/upstream-errors.js';
import type { AnswerRead, ExchangeEvents, ExchangeRequest } from './gateway-exchange.js';

export interface ExchangeObservers {
  readonly metrics: Pick<SidecarMetrics, 'gatewayRoundTrip' | 'gatewayError' | 'retry' | 'answerMismatch'>;
  /** A span per attempt, per wait for a token (docs/operations.md#tracing). */
  readonly tracing: Tracing;
  /** A timestamp refusal re-measures the gateway's clock (the gateway client's hook measures every answer). */
  readonly clock: Pick<ClockCorrection, 'remeasure'>;
  readonly now?: (() => number) | undefined;
}

/**
 * How the gateway exchange is observed: its spans (a client span per attempt, an internal one per wait for a token),
 * its metrics, and the clock's re-measurement after a timestamp refusal. Made once; nothing here is per request.
 */
export function exchangeEvents(observers: ExchangeObservers): ExchangeEvents {
  const { metrics, tracing, clock } = observers;
  const now = observers.now ?? Date.now;
  return {
    tokenWaitStarted: (trace, afterRejection) =>
      tracing.startSpan('wait for a token', 'internal', trace, afterRejection ? AFTER_REJECTION : undefined),
    tokenWaitEnded: (wait, error) => {
      if (error !== undefined) wait.fail(asSidecarError(error).code);
      wait.end();
    },
    attemptStarted: (request, n) => (tracing.enabled ? attemptSpan(tracing, request, n) : undefined),
    attemptThrew: (attempt, error) => {
      // A bug is answered sidecar.internal: the span still ends, as an error.
      attempt?.fail(asSidecarError(error).code);
      attempt?.end();
    },
    attemptEnded: (request, attempt, outcome, answer, sentAt) => {
      if (attempt !== undefined) endAttempt(attempt, outcome, answer);
      if (outcome.kind === 'not_sent') return;
      metrics.gatewayRoundTrip(request.route, (performance.now() - sentAt) / 1000);
      if (outcome.kind === 'sent_no_answer') {
        if (errorCode(outcome.error) === 'ERR_GATEWAY_ANSWER_MISMATCH') metrics.answerMismatch();
        return;
      }
      if (answer?.label !== undefined) metrics.gatewayError(answer.label);
      if (isTimestampRefusal(answer?.gatewayCode)) clock.remeasure(outcome.response.headers.date, now());
    },
    retrying: (reason) => metrics.retry(reason),
  };
}

const AFTER_REJECTION = { 'sidecar.token.after_rejection': true } as const;

/** One attempt's client span: its route and number; the outcome is added by endAttempt. */
function attemptSpan(tracing: Tracing, request: ExchangeRequest, n: number): TraceSpan {
  return tracing.startSpan(`POST ${request.route}`, 'client', request.trace, {
    'http.request.method': 'POST',
    'http.route': request.route,
    'sidecar.attempt': n,
  });
}

/** What the attempt's span says of its outcome: sent or not, the gateway's status and code, or the cause code. */
function endAttempt(span: TraceSpan, outcome: SendOutcome, answer: AnswerRead | undefined): void {
  if (outcome.kind === 'response') {
    const { status } = outcome.response;
    const code = answer?.gatewayCode;
    span.setAttributes({ 'sidecar.sent': true, 'http.response.status_code': status, 'sidecar.gateway_code': code });
    if (status >= 400) span.fail(code ?? String(status));
  } else {
    const cause = errorCode(outcome.error);
    span.setAttributes({ 'sidecar.sent': outcome.kind === 'sent_no_answer', 'sidecar.cause_code': cause });
    span.fail(cause);
  }
  span.end();
}
