import type { BaseAddress } from '../config/base-url.js';
import { maskSecrets, type Secret } from '../config/secret.js';
import { asSidecarError, SidecarError, sidecarErrors } from '../errors.js';
import type { SidecarMetrics } from '../observability/metrics.js';
import { NO_TRACING, type TraceContext, type TraceSpan, type Tracing } from '../observability/tracing.js';
import { signedUrl, upstreamPath, type RequestTarget } from '../signing/canonical-url.js';
import { newNonce } from '../signing/nonce.js';
import type { Signer } from '../signing/signer.js';
import { signingString, unixTimestamp } from '../signing/signing-string.js';
import { setTimeout as sleep } from 'node:timers/promises';
import { backoffDelayMs } from '../token/backoff.js';
import type { TokenManager } from '../token/token-manager.js';
import {
  errorCode,
  upstreamErrors,
  type Forwarder,
  type SendOutcome,
  type UpstreamError,
  type UpstreamResponse,
} from '../upstream/forwarder.js';
import { jsonObject } from '../upstream/json-body.js';
import type { ClockCorrection } from '../signing/clock-correction.js';
import { GATEWAY_ERROR_CODES, type GatewayErrorCode } from '../observability/metric-names.js';

export interface SignedSendDeps {
  readonly base: BaseAddress;
  readonly signer: Signer;
  readonly tokens: Pick<TokenManager, 'usableToken' | 'token' | 'tokenAfterRejection' | 'shared'>;
  readonly forwarder: Pick<Forwarder, 'send'>;
  /** Signing time and its re-measurement (SIDECAR_CLOCK_SKEW_CORRECTION); the forwarder's hook measures every answer. */
  readonly clock: Pick<ClockCorrection, 'timestampMs' | 'remeasure'>;
  readonly metrics: Pick<SidecarMetrics, 'signed' | 'gatewayRoundTrip' | 'gatewayError' | 'retry' | 'answerMismatch'>;
  readonly connectRetryDeadlineMs: number;
  readonly now?: () => number;
  /** A span per attempt, per wait for a token (docs/operations.md#tracing). */
  readonly tracing?: Tracing;
  /** SIDECAR_TRACE_PROPAGATE_UPSTREAM: each attempt carries its traceparent to the gateway. */
  readonly propagateUpstream?: boolean;
}

export interface SignedRequest {
  readonly route: string;
  readonly target: RequestTarget;
  readonly envelope: { readonly data: string; readonly json: string };
  readonly headers: Record<string, string>;
  readonly checkAnswer?: AnswerCheck | undefined;
  /** The request's deadline (and shutdown's cut): the token wait, the connection queue and the exchange end there. */
  readonly signal: AbortSignal;
  /** The request's server span: attempts and waits are traced under it. */
  readonly trace?: TraceContext | undefined;
}

/** Parts of a signing string, for the diagnostic log on signature.verify.failed. */
export interface SignedParts {
  readonly fullUrl: string;
  readonly timestamp: string;
  readonly nonce: string;
}

/**
 * How one client request ended at the gateway. `attempts` counts the copies that reached (or may have reached)
 * the gateway: 0 means certainly none, whatever the failure.
 */
export type SendResult =
  | {
      readonly kind: 'answered';
      readonly response: UpstreamResponse;
      readonly gatewayCode: string | undefined;
      readonly attempts: number;
      readonly signed: SignedParts;
    }
  | { readonly kind: 'failed'; readonly error: SidecarError; readonly attempts: number };

export type SignedResult = Extract<SendResult, { kind: 'answered' }>;

/**
 * Sends of one request after a 401 FAILED, each with a newer token than the one refused: one; in fleet mode two.
 *
 * A 401 FAILED means the gateway refused the token before doing anything (spec 5.1), so no send that met one can
 * have moved money. In a fleet a second one has a cause of its own: another replica's password login revoked the
 * token this replica had just got (spec 4.1 rule 3), which after Redis lost the record and the lock (a wipe: every
 * replica may have to log in) can happen once more than one retry covers. So in fleet mode a request whose second
 * send was refused too is sent a third time, with the newer token the fleet has by then. Bounds: at most three sends
 * of one request ever reach the gateway with a token refused, each with a token newer than the last and never one
 * already sent; no fourth. A single pod has nobody to revoke its token: one retry, as the spec recommends.
 */
const TOKEN_RESENDS = { single: 1, fleet: 2 } as const;

/**
 * Signs and sends one client request, applying the retry contract (README, "Retry contract") and nothing more:
 * - connection failures before any byte left: re-sign and retry with capped backoff within a deadline;
 * - 401 FAILED: fresh token, re-sign with a new timestamp and nonce, send once more (fleet mode: up to twice more,
 *   TOKEN_RESENDS);
 * - anything after bytes were sent without an answer: never resent (sidecar.upstream.outcome_unknown).
 * Every attempt gets its own timestamp and nonce (spec 5.2: "including retries").
 */
export async function sendSigned(deps: SignedSendDeps, request: SignedRequest): Promise<SendResult> {
  const now = deps.now ?? Date.now;
  const tracing = deps.tracing ?? NO_TRACING;
  const { signal, trace } = request;
  const giveUpAt = performance.now() + deps.connectRetryDeadlineMs;
  let attempts = 0;
  const failed = (error: unknown): SendResult => ({ kind: 'failed', error: asSidecarError(error), attempts });
  let token = deps.tokens.usableToken();
  if (token === undefined) {
    const wait = tracing.startSpan('wait for a token', 'internal', trace);
    try {
      token = await deps.tokens.token(signal, wait.context);
    } catch (error) {
      wait.fail(asSidecarError(error).code);
      return failed(error);
    } finally {
      wait.end();
    }
  }
  const maxTokenResends = deps.tokens.shared ? TOKEN_RESENDS.fleet : TOKEN_RESENDS.single;
  let tokenResends = 0;
  /** Every access token a copy of this request was sent with: none is ever sent twice. */
  const sentWith = new Set<string>();
  let connectFailures = 0;
  /** The gateway's last 401 FAILED, which a newer token is being tried against. */
  let previous: SendResult | undefined;
  for (let n = 1; ; n++) {
    const span = tracing.enabled ? attemptSpan(tracing, request, n) : undefined;
    const bearer = token.accessToken;
    let sent: Awaited<ReturnType<typeof attempt>>;
    try {
      sent = await attempt(deps, request, bearer, deps.clock.timestampMs(now()), span);
    } catch (error) {
      // A bug is answered sidecar.internal: the span still ends, as an error.
      span?.fail(asSidecarError(error).code);
      span?.end();
      // The token (HSM, KMS) could not sign: this copy was never sent. After a 401 FAILED the gateway's own answer
      // is the true one (it did receive the first copy); before any answer, nothing was sent (retryable).
      if (error instanceof SidecarError && error.code === 'sidecar.signer.unavailable')
        return previous ?? failed(error);
      throw error;
    }
    const { outcome, signed } = sent;
    if (outcome.kind === 'not_sent') {
      const delay = backoffDelayMs(connectFailures++, 100, 2_000);
      // A refused, unresolvable or timed-out connection may heal; a certificate the sidecar does not trust
      // will not, so it is answered at once (still retryable: nothing was sent).
      if (!outcome.transient || performance.now() + delay >= giveUpAt || signal.aborted)
        return failed(sidecarErrors.upstreamUnreachable(outcome.error));
      deps.metrics.retry('connect_failed');
      try {
        await sleep(delay, undefined, { signal });
      } catch {
        return failed(sidecarErrors.upstreamUnreachable(outcome.error));
      }
      continue;
    }
    attempts++;
    sentWith.add(bearer.reveal());
    if (outcome.kind === 'sent_no_answer') {
      if (errorCode(outcome.error) === 'ERR_GATEWAY_ANSWER_MISMATCH') deps.metrics.answerMismatch();
      return failed(sidecarErrors.outcomeUnknown(outcome.timedOut ? 504 : 502, outcome.error));
    }
    const { response } = outcome;
    const code = gatewayCode(response, bearer);
    const label = errorLabel(response.status, code);
    if (label) deps.metrics.gatewayError(label);
    if (code !== undefined && TIMESTAMP_REFUSALS.has(code)) deps.clock.remeasure(response.headers.date, now());
    const answered: SendResult = { kind: 'answered', response, gatewayCode: code, attempts, signed };
    if (!isTokenRejection(response, code) || tokenResends === maxTokenResends) return answered;
    previous = answered;
    tokenResends++;
    const wait = tracing.startSpan('wait for a token', 'internal', trace, { 'sidecar.token.after_rejection': true });
    try {
      token = await deps.tokens.tokenAfterRejection(token.generation, signal, wait.context);
    } catch (error) {
      wait.fail(asSidecarError(error).code);
      // No fresh token to be had: the gateway's own 401 FAILED goes back. It is the true answer (the gateway
      // refused the token and did nothing), whereas a sidecar error would hide that the request did reach it.
      return answered;
    } finally {
      wait.end();
    }
    // A token already refused for this request is never sent again (the manager gives a newer one; this says so).
    if (sentWith.has(token.accessToken.reveal())) return answered;
    deps.metrics.retry('token_rejected');
  }
}

/** One attempt's client span: its route and number; the outcome is added by endAttempt. */
function attemptSpan(tracing: Tracing, request: SignedRequest, n: number): TraceSpan {
  return tracing.startSpan(`POST ${request.route}`, 'client', request.trace, {
    'http.request.method': 'POST',
    'http.route': request.route,
    'sidecar.attempt': n,
  });
}

/** What the attempt's span says of its outcome: sent or not, the gateway's status and code, or the cause code. */
function endAttempt(span: TraceSpan, outcome: SendOutcome, bearer: Secret): void {
  if (outcome.kind === 'response') {
    const { status } = outcome.response;
    const code = gatewayCode(outcome.response, bearer);
    span.setAttributes({ 'sidecar.sent': true, 'http.response.status_code': status, 'sidecar.gateway_code': code });
    if (status >= 400) span.fail(code ?? String(status));
  } else {
    const cause = errorCode(outcome.error);
    span.setAttributes({ 'sidecar.sent': outcome.kind === 'sent_no_answer', 'sidecar.cause_code': cause });
    span.fail(cause);
  }
  span.end();
}

async function attempt(
  deps: SignedSendDeps,
  request: SignedRequest,
  bearer: Secret,
  nowMs: number,
  span: TraceSpan | undefined,
): Promise<{ outcome: SendOutcome; signed: SignedParts }> {
  const fullUrl = signedUrl(deps.base, request.target);
  const timestamp = unixTimestamp(nowMs);
  const nonce = newNonce();
  const started = performance.now();
  let signature: string;
  try {
    signature = await deps.signer.sign(
      signingString({ method: 'POST', fullUrl, timestamp, nonce, data: request.envelope.data }),
    );
  } catch (error) {
    deps.metrics.signed(deps.signer.kind, 'failure', (performance.now() - started) / 1000);
    throw error;
  }
  deps.metrics.signed(deps.signer.kind, 'success', (performance.now() - started) / 1000);
  const sentAt = performance.now();
  const headers: Record<string, string> = {
    ...request.headers,
    // The sidecar's values win over any a client sent.
    'content-type': 'application/json',
    authorization: `Bearer ${bearer.reveal()}`,
    'x-timestamp': timestamp,
    'x-nonce': nonce,
    'x-signature': signature,
  };
  // The attempt's own context, never the caller's: the caller's traceparent was filtered out (headers.ts).
  if (deps.propagateUpstream === true && span?.context !== undefined)
    Object.assign(headers, deps.tracing?.headers(span.context));
  const outcome = await deps.forwarder.send({
    path: upstreamPath(deps.base, request.target),
    headers,
    body: request.envelope.json,
    signal: request.signal,
    ...(request.checkAnswer === undefined ? {} : { checkAnswer: request.checkAnswer }),
    trace: span?.context,
  });
  if (span !== undefined) endAttempt(span, outcome, bearer);
  if (outcome.kind !== 'not_sent') deps.metrics.gatewayRoundTrip(request.route, (performance.now() - sentAt) / 1000);
  return { outcome, signed: { fullUrl, timestamp, nonce } };
}

/** Spec 7's timestamp refusals: the gateway's clock moved away from what the correction assumed. */
const TIMESTAMP_REFUSALS = new Set(['signature.timestamp.expired', 'signature.timestamp.future']);

// The gateway's answer, as the retry rules and the metrics read it.

/**
 * The gateway's own `code` field of an error answer, if its body is a JSON object that has one, with the access
 * token the request carried masked (it goes to the request log and the span). Successes are not parsed: nothing
 * reads their code, and they are the hot path.
 */
export function gatewayCode(response: UpstreamResponse, bearer: Secret): string | undefined {
  if (response.status < 400) return undefined;
  const code = jsonObject(response.body)?.code;
  return typeof code === 'string' ? maskSecrets(code, [bearer]) : undefined;
}

/** Spec 5.1: HTTP 401 with body code FAILED means the token was refused before anything was done. */
export function isTokenRejection(response: UpstreamResponse, code: string | undefined): boolean {
  return response.status === 401 && code === 'FAILED';
}

const KNOWN = new Set<string>(GATEWAY_ERROR_CODES);

/** Metric label for a gateway error answer, bounded to the contract's set; undefined for a success. */
export function errorLabel(status: number, code: string | undefined): GatewayErrorCode | undefined {
  if (status < 400) return undefined;
  if (status === 403) return 'ip.forbidden';
  return code !== undefined && KNOWN.has(code) ? (code as GatewayErrorCode) : 'other';
}

// Which answer is this request's.

export type AnswerCheck = (response: UpstreamResponse) => UpstreamError | undefined;

/**
 * On a keep-alive HTTP/1.1 connection, a gateway that writes a stray second copy of an answer can have that copy
 * read as the next request's answer; nothing in HTTP/1.1 tells them apart. Where the client's payload and the
 * gateway's JSON answer both carry a correlation field (invoice_no by default), their values must be equal, or
 * the answer is not this request's. Answers without the field, or payloads without it, cannot be checked.
 * Undefined when the payload carries none of the fields: nothing to compare.
 */
export function answerCorrelation(
  fields: readonly string[],
  payload: Readonly<Record<string, unknown>>,
): AnswerCheck | undefined {
  const expected = fields
    .filter((field) => Object.hasOwn(payload, field))
    .map((field) => [field, comparable(payload[field])] as const);
  if (expected.length === 0) return undefined;
  // A key appears in JSON text as its quoted self unless written with escapes: a body with neither that nor any
  // backslash cannot hold the field, and is not parsed (successes, the hot path, seldom echo it).
  const needles = expected.map(([field]) => JSON.stringify(field));
  return (response) => {
    const { body } = response;
    if (!needles.some((needle) => body.includes(needle)) && !body.includes(BACKSLASH)) return undefined;
    const answer = jsonObject(body);
    if (answer === undefined) return undefined;
    const differing = expected.find(
      ([field, value]) => Object.hasOwn(answer, field) && comparable(answer[field]) !== value,
    );
    return differing === undefined ? undefined : upstreamErrors.answerMismatch(differing[0]);
  };
}

const BACKSLASH = 0x5c;

/** A gateway may echo `"123"` for `123`: values are compared as text, objects by their JSON. */
function comparable(value: unknown): string {
  return typeof value === 'string' ? value : (JSON.stringify(value) ?? '');
}
