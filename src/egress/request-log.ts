import { hash } from 'node:crypto';
import type { Logger } from '../observability/log.js';
import type { TraceContext } from '../observability/tracing.js';
import { signingString } from '../signing/signing-string.js';
import type { RequestId } from '../inbound/request-id.js';
import type { SignedCopy } from './request-signing.js';

function sha256Hex(value: string | Buffer): string {
  // The one-shot form: no Hash object per call.
  return hash('sha256', value, 'hex');
}

/** How one client request ended: the metric labels and the request log line are made from it. */
export interface RequestOutcome {
  readonly status: number;
  /** Metric label: ok, a sidecar.* code, or a bounded gateway error label. */
  readonly code: string;
  /** The gateway's own code, for the log line only (unbounded, so never a label). */
  readonly gatewayCode?: string | undefined;
  /** Copies of the request that reached (or may have reached) the gateway: 0 means certainly none. */
  readonly attempts: number;
  /** The network error code behind unreachable / outcome_unknown (never the error's message). */
  readonly causeCode?: string | undefined;
  /** Which hop that error belongs to: proxy, gateway or sidecar (upstream/upstream-errors.ts, causeFamily). */
  readonly causeFamily?: string | undefined;
  /** The client's body; only its length and SHA-256 are logged. */
  readonly payload?: Buffer | undefined;
  /**
   * When shutdown answered the client first: the handler's own outcome that came afterwards (the gateway's late
   * answer, or the error that ended the exchange). Kept for reconciliation; status and code are what the client got.
   */
  readonly late?: { readonly status: number; readonly code: string } | undefined;
  /** false when the caller had closed its connection before the answer was written; absent when it was written. */
  readonly delivered?: false | undefined;
  /** SHA-256 of the request's Idempotency-Key, when it had one (the key itself is never logged). */
  readonly idempotencyKeySha256?: string | undefined;
  /** true when the answer came from the idempotency record: nothing was sent for this request. */
  readonly replayed?: true | undefined;
}

/**
 * One line per request, through the redacting logger like every other line. The payload appears only as its
 * length and SHA-256: enough to match it against the internal service's own log, never enough to read it.
 * Undefined fields are left out of the line.
 */
export function logRequest(
  log: Logger,
  requestId: RequestId,
  route: string,
  durationMs: number,
  outcome: RequestOutcome,
  /** The request's server span, when tracing is on: its ids join the line to the trace. */
  trace?: TraceContext,
): void {
  const level = outcome.status >= 500 ? 'error' : outcome.status >= 400 ? 'warn' : 'info';
  // The digest is computed only for lines that are written: at level warn, successes cost nothing here.
  if (!log.isLevelEnabled(level)) return;
  const { payload, late } = outcome;
  log[level](
    {
      event: 'request',
      requestId,
      route,
      status: outcome.status,
      code: outcome.code,
      gatewayCode: outcome.gatewayCode,
      attempts: outcome.attempts,
      causeCode: outcome.causeCode,
      causeFamily: outcome.causeFamily,
      durationMs: Math.round(durationMs * 1000) / 1000,
      payloadBytes: payload?.length,
      payloadSha256: payload === undefined ? undefined : sha256Hex(payload),
      lateStatus: late?.status,
      lateCode: late?.code,
      delivered: outcome.delivered,
      idempotencyKeySha256: outcome.idempotencyKeySha256,
      replayed: outcome.replayed,
      traceId: trace?.traceId,
      spanId: trace?.spanId,
    },
    'request answered',
  );
}

/**
 * signature.verify.failed is the most common integration failure. The signing string is logged with `data`
 * replaced by its SHA-256, so an operator can diff it against the gateway's expectation without the payload.
 */
export function logVerifyFailure(log: Logger, requestId: RequestId, copy: SignedCopy, data: string): void {
  const { fullUrl, timestamp, nonce } = copy;
  const redacted = signingString({ method: 'POST', fullUrl, timestamp, nonce, data: `sha256:${sha256Hex(data)}` });
  log.warn(
    { event: 'signature.verify.failed', requestId, signingString: redacted, fullUrl },
    'gateway could not verify the signature; compare this signing string with the one the gateway expects',
  );
}
