import type { BaseAddress } from '../config/base-url.js';
import { asSidecarError, sidecarErrors, type SidecarError } from '../errors.js';
import type { SidecarMetrics } from '../observability/metrics.js';
import { signedUrl, upstreamPath, type RequestTarget } from '../signing/canonical-url.js';
import { newNonce } from '../signing/nonce.js';
import type { Signer } from '../signing/signer.js';
import { signingString, unixTimestamp } from '../signing/signing-string.js';
import { backoffDelayMs, sleep } from '../token/backoff.js';
import type { TokenManager } from '../token/token-manager.js';
import { errorCode, type Forwarder, type SendOutcome, type UpstreamResponse } from '../upstream/forwarder.js';
import type { ClockCorrection } from '../signing/clock-correction.js';
import type { AnswerCheck } from './answer-correlation.js';
import { errorLabel, gatewayCode, isTokenRejection } from './gateway-answer.js';

export interface SignedSendDeps {
  readonly base: BaseAddress;
  readonly signer: Signer;
  readonly tokens: Pick<TokenManager, 'usableToken' | 'token' | 'tokenAfterRejection'>;
  readonly forwarder: Pick<Forwarder, 'send'>;
  /** Signing time and its re-measurement (SIDECAR_CLOCK_SKEW_CORRECTION); the forwarder measures every answer. */
  readonly clock: Pick<ClockCorrection, 'timestampMs' | 'remeasure'>;
  readonly metrics: Pick<SidecarMetrics, 'signed' | 'gatewayRoundTrip' | 'gatewayError' | 'retry' | 'answerMismatch'>;
  readonly connectRetryDeadlineMs: number;
  readonly now?: () => number;
}

export interface SignedRequest {
  readonly route: string;
  readonly target: RequestTarget;
  readonly envelope: { readonly data: string; readonly json: string };
  readonly headers: Record<string, string>;
  readonly checkAnswer?: AnswerCheck | undefined;
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
 * Signs and sends one client request, applying the retry contract (README, "Retry contract") and nothing more:
 * - connection failures before any byte left: re-sign and retry with capped backoff within a deadline;
 * - 401 FAILED: fresh token, re-sign with a new timestamp and nonce, send once more;
 * - anything after bytes were sent without an answer: never resent (sidecar.upstream.outcome_unknown).
 * Every attempt gets its own timestamp and nonce (spec 5.2: "including retries").
 */
export async function sendSigned(deps: SignedSendDeps, request: SignedRequest): Promise<SendResult> {
  const now = deps.now ?? Date.now;
  const giveUpAt = performance.now() + deps.connectRetryDeadlineMs;
  let attempts = 0;
  const failed = (error: unknown): SendResult => ({ kind: 'failed', error: asSidecarError(error), attempts });
  let token = deps.tokens.usableToken();
  if (token === undefined) {
    try {
      token = await deps.tokens.token();
    } catch (error) {
      return failed(error);
    }
  }
  let tokenRetried = false;
  let connectFailures = 0;
  for (;;) {
    const { outcome, signed } = await attempt(deps, request, token.accessToken.reveal(), deps.clock.timestampMs(now()));
    if (outcome.kind === 'not_sent') {
      const delay = backoffDelayMs(connectFailures++, 100, 2_000);
      // A refused, unresolvable or timed-out connection may heal; a certificate the sidecar does not trust
      // will not, so it is answered at once (still retryable: nothing was sent).
      if (!outcome.transient || performance.now() + delay >= giveUpAt)
        return failed(sidecarErrors.upstreamUnreachable(outcome.error));
      deps.metrics.retry('connect_failed');
      await sleep(delay);
      continue;
    }
    attempts++;
    if (outcome.kind === 'sent_no_answer') {
      if (errorCode(outcome.error) === 'ERR_GATEWAY_ANSWER_MISMATCH') deps.metrics.answerMismatch();
      return failed(sidecarErrors.outcomeUnknown(outcome.timedOut ? 504 : 502, outcome.error));
    }
    const { response } = outcome;
    const code = gatewayCode(response);
    const label = errorLabel(response.status, code);
    if (label) deps.metrics.gatewayError(label);
    if (code !== undefined && TIMESTAMP_REFUSALS.has(code)) deps.clock.remeasure(response.headers.date, now());
    const answered: SendResult = { kind: 'answered', response, gatewayCode: code, attempts, signed };
    if (!isTokenRejection(response, code) || tokenRetried) return answered;
    tokenRetried = true;
    try {
      token = await deps.tokens.tokenAfterRejection(token.generation);
    } catch {
      // No fresh token to be had: the gateway's own 401 FAILED goes back. It is the true answer (the gateway
      // refused the token and did nothing), whereas a sidecar error would hide that the request did reach it.
      return answered;
    }
    deps.metrics.retry('token_rejected');
  }
}

async function attempt(
  deps: SignedSendDeps,
  request: SignedRequest,
  bearer: string,
  nowMs: number,
): Promise<{ outcome: SendOutcome; signed: SignedParts }> {
  const fullUrl = signedUrl(deps.base, request.target);
  const timestamp = unixTimestamp(nowMs);
  const nonce = newNonce();
  const started = performance.now();
  const signature = await deps.signer.sign(
    signingString({ method: 'POST', fullUrl, timestamp, nonce, data: request.envelope.data }),
  );
  deps.metrics.signed((performance.now() - started) / 1000);
  const sentAt = performance.now();
  const headers: Record<string, string> = {
    ...request.headers,
    // The sidecar's values win over any a client sent.
    'content-type': 'application/json',
    authorization: `Bearer ${bearer}`,
    'x-timestamp': timestamp,
    'x-nonce': nonce,
    'x-signature': signature,
  };
  const outcome = await deps.forwarder.send({
    path: upstreamPath(deps.base, request.target),
    headers,
    body: request.envelope.json,
    ...(request.checkAnswer === undefined ? {} : { checkAnswer: request.checkAnswer }),
  });
  if (outcome.kind !== 'not_sent') deps.metrics.gatewayRoundTrip(request.route, (performance.now() - sentAt) / 1000);
  return { outcome, signed: { fullUrl, timestamp, nonce } };
}

/** Spec 7's timestamp refusals: the gateway's clock moved away from what the correction assumed. */
const TIMESTAMP_REFUSALS = new Set(['signature.timestamp.expired', 'signature.timestamp.future']);
