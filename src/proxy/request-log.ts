import { hash } from 'node:crypto';
import { writeLine, type Logger } from '../observability/log.js';
import { signingString } from '../signing/signing-string.js';
import type { RequestId } from './request-id.js';
import type { SignedResult } from './signed-send.js';

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
  /** The client's body; only its length and SHA-256 are logged. */
  readonly payload?: Buffer | undefined;
  /**
   * When shutdown answered the client first: the handler's own outcome that came afterwards (the gateway's late
   * answer, or the error that ended the exchange). Kept for reconciliation; status and code are what the client got.
   */
  readonly late?: { readonly status: number; readonly code: string } | undefined;
}

/**
 * One line per request. The payload appears only as its length and SHA-256: enough to match it against the
 * internal service's own log, never enough to read it. The line is built from a template (see requestLineMembers)
 * and written through writeLine: it is written for every request.
 */
export function logRequest(log: Logger, requestId: RequestId, route: string, durationMs: number, outcome: RequestOutcome): void {
  const level = outcome.status >= 500 ? 'error' : outcome.status >= 400 ? 'warn' : 'info';
  // The line, and the digest in it, are made only when written: at level warn, successes cost nothing here.
  if (!log.isLevelEnabled(level)) return;
  writeLine(log, level, requestLineMembers(requestId, route, durationMs, outcome), 'request answered');
}

/**
 * The request line's fields as JSON members, exactly `JSON.stringify(fields).slice(1, -1)` for the fields event,
 * requestId, route, status, code, gatewayCode, attempts, causeCode, durationMs, payloadBytes, payloadSha256,
 * lateStatus and lateCode, in that order, with undefined ones left out. Serialising the whole object with
 * JSON.stringify cost more than anything else in the line. Only text that can hold any character is escaped on
 * every line (the gateway's code, the cause code); the request id is sanitised (RequestId), the digest is hex,
 * the route and the outcome codes come from bounded sets and are escaped once each, and numbers are integers or
 * a finite duration.
 */
export function requestLineMembers(requestId: RequestId, route: string, durationMs: number, outcome: RequestOutcome): string {
  const { payload, late } = outcome;
  let text = `"event":"request","requestId":"${requestId}","route":${boundedJson(route)},"status":${outcome.status},"code":${boundedJson(outcome.code)}`;
  if (outcome.gatewayCode !== undefined) text += `,"gatewayCode":${JSON.stringify(outcome.gatewayCode)}`;
  text += `,"attempts":${outcome.attempts}`;
  if (outcome.causeCode !== undefined) text += `,"causeCode":${JSON.stringify(outcome.causeCode)}`;
  // JSON has no NaN or Infinity (JSON.stringify writes null); a duration is always finite, but the line stays JSON.
  const duration = Math.round(durationMs * 1000) / 1000;
  text += `,"durationMs":${Number.isFinite(duration) ? duration : 'null'}`;
  if (payload !== undefined) text += `,"payloadBytes":${payload.length},"payloadSha256":"${sha256Hex(payload)}"`;
  if (late !== undefined) text += `,"lateStatus":${late.status},"lateCode":${boundedJson(late.code)}`;
  return text;
}

// Routes (from the config) and outcome codes (metric labels) are bounded sets; the cap keeps a surprise from
// growing the cache without bound.
const BOUNDED_JSON_CACHE_LIMIT = 1_000;
const boundedJsonCache = new Map<string, string>();

function boundedJson(value: string): string {
  let json = boundedJsonCache.get(value);
  if (json === undefined) {
    json = JSON.stringify(value);
    if (boundedJsonCache.size < BOUNDED_JSON_CACHE_LIMIT) boundedJsonCache.set(value, json);
  }
  return json;
}

/**
 * signature.verify.failed is the most common integration failure. The signing string is logged with `data`
 * replaced by its SHA-256, so an operator can diff it against the gateway's expectation without the payload.
 */
export function logVerifyFailure(log: Logger, requestId: RequestId, result: SignedResult, data: string): void {
  const redacted = signingString({ method: 'POST', ...result.signed, data: `sha256:${sha256Hex(data)}` });
  log.warn(
    { event: 'signature.verify.failed', requestId, signingString: redacted, fullUrl: result.signed.fullUrl },
    'gateway could not verify the signature; compare this signing string with the one the gateway expects',
  );
}
