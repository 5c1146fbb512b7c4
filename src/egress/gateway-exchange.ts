import { setTimeout as sleep } from 'node:timers/promises';
import type { Secret } from '../config/secret.js';
import { asSidecarError, SidecarError, sidecarErrors } from '../errors.js';
import type { CauseFamily, GatewayErrorCode } from '../observability/metric-names.js';
import type { TraceContext, TraceSpan } from '../observability/tracing.js';
import { backoffDelayMs } from '../token/backoff.js';
import type { TokenManager } from '../token/token-manager.js';
import {
  errorLabel,
  gatewayCode,
  isTokenRejection,
  type AnswerCheck,
  type UpstreamResponse,
} from '../upstream/gateway-answer.js';
import type { GatewayClient } from '../upstream/gateway-client.js';
import type { RequestEnd, SendOutcome } from '../upstream/gateway-send.js';

/** What the exchange needs of a request; the signing function passed in reads the rest of it. */
export interface ExchangeRequest {
  /** The route's label: attempt spans and the round-trip metric. */
  readonly route: string;
  /**
   * The request's end (its deadline, and shutdown's cut): the token wait, the connection queue and the exchange
   * end there. Its signal is asked for only by a wait.
   */
  readonly end: RequestEnd;
  /** The request's server span: attempts and waits are traced under it. */
  readonly trace?: TraceContext | undefined;
  /** Whether an answer is this request's (gateway-answer.ts, answerCorrelation); undefined: nothing to compare. */
  readonly checkAnswer?: AnswerCheck | undefined;
  /**
   * Runs before every copy is written, once its connection is lent and it is signed, right before its first byte
   * leaves (a recovery point: "this request is being sent"). Rejecting with a SidecarError refuses the copy: nothing
   * is written, and the request is answered that error, or, when a 401 FAILED came back before, that 401 (the
   * gateway's true answer); any other rejection is a bug (sidecar.internal). A hook that acts once per request keeps
   * its own flag. The gateway client runs it (UpstreamRequest.beforeWrite, which says when exactly).
   */
  readonly beforeWrite?: (() => Promise<void>) | undefined;
}

/** One signed copy, ready to send: what the signing function returns. */
export interface SendableCopy {
  readonly path: string;
  readonly headers: Record<string, string>;
  readonly body: string;
}

/**
 * Signs one copy of `request` with `bearer`: a new timestamp and nonce every time (spec 5.2: "including retries").
 * `trace` is the copy's attempt span, which the copy may carry to the gateway. Rejects with
 * sidecar.signer.unavailable when no signature can be made now (nothing was sent).
 */
export type SignCopy<R extends ExchangeRequest, C extends SendableCopy> = (
  request: R,
  bearer: Secret,
  trace: TraceContext | undefined,
) => Promise<C>;

/**
 * What the exchange reports as it goes, for tracing and metrics (exchange-events.ts); none of it decides anything.
 * Spans are returned so that the work under them (a token grant, a connection wait) is traced as their child.
 */
export interface ExchangeEvents {
  /** A wait for an access token begins; `afterRejection`: for one newer than the token a 401 FAILED refused. */
  tokenWaitStarted(trace: TraceContext | undefined, afterRejection: boolean): TraceSpan;
  /** The wait ended: with a token, or with the error that ended it. */
  tokenWaitEnded(wait: TraceSpan, error: unknown): void;
  /** Copy number `n` is about to be signed and sent (connection retries count). */
  attemptStarted(request: ExchangeRequest, n: number): TraceSpan | undefined;
  /** The copy was never sent: signing, the hook before the write, or a bug threw. */
  attemptThrew(attempt: TraceSpan | undefined, error: unknown): void;
  /** The copy's fate; `sentAt`: performance.now() once it was signed; `answer`: read when it was answered. */
  attemptEnded(
    request: ExchangeRequest,
    attempt: TraceSpan | undefined,
    outcome: SendOutcome,
    answer: AnswerRead | undefined,
    sentAt: number,
  ): void;
  /** Another copy is to be sent, and why. */
  retrying(reason: 'connect_failed' | 'token_rejected'): void;
}

/** An answer as the retry rules, the metrics and the log line read it (gateway-answer.ts). */
export interface AnswerRead {
  /** The gateway's own code of an error answer, the token masked; undefined for a success. */
  readonly gatewayCode: string | undefined;
  /** Its bounded metric label; undefined for a success. */
  readonly label: GatewayErrorCode | undefined;
}

export interface ExchangeDeps<R extends ExchangeRequest, C extends SendableCopy> {
  readonly tokens: Pick<TokenManager, 'usableToken' | 'token' | 'tokenAfterRejection' | 'shared'>;
  readonly gatewayClient: Pick<GatewayClient, 'send'>;
  readonly sign: SignCopy<R, C>;
  readonly events: ExchangeEvents;
  /** How long connection failures (nothing sent) are retried, from the first send. */
  readonly connectRetryDeadlineMs: number;
}

/**
 * How one client request ended at the gateway. `attempts` counts the copies that reached (or may have reached)
 * the gateway: 0 means certainly none, whatever the failure.
 */
export type ExchangeResult<C> =
  | ({
      readonly kind: 'answered';
      readonly response: UpstreamResponse;
      readonly attempts: number;
      /** The copy the answer is to. */
      readonly copy: C;
    } & AnswerRead)
  | {
      readonly kind: 'failed';
      readonly error: SidecarError;
      readonly attempts: number;
      /** Which hop failed, for a failed send (unreachable, outcome_unknown); undefined for any other failure. */
      readonly hop?: CauseFamily | undefined;
    };

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
 * The exchange of one client request with the gateway, applying the retry contract (README, "Retry contract") and
 * nothing more:
 * - connection failures before any byte left: re-sign and retry with capped backoff within a deadline;
 * - 401 FAILED: fresh token, re-sign with a new timestamp and nonce, send once more (fleet mode: up to twice more,
 *   TOKEN_RESENDS);
 * - anything after bytes were sent without an answer: never resent (sidecar.upstream.outcome_unknown).
 * Every copy is signed afresh by `deps.sign`.
 */
export async function exchange<R extends ExchangeRequest, C extends SendableCopy>(
  deps: ExchangeDeps<R, C>,
  request: R,
): Promise<ExchangeResult<C>> {
  const { events } = deps;
  const { end } = request;
  const giveUpAt = performance.now() + deps.connectRetryDeadlineMs;
  let attempts = 0;
  let token = deps.tokens.usableToken();
  if (token === undefined) {
    const wait = events.tokenWaitStarted(request.trace, false);
    try {
      token = await deps.tokens.token(end.signal, wait.context);
      events.tokenWaitEnded(wait, undefined);
    } catch (error) {
      events.tokenWaitEnded(wait, error);
      return failed(error, attempts);
    }
  }
  const maxTokenResends = deps.tokens.shared ? TOKEN_RESENDS.fleet : TOKEN_RESENDS.single;
  let tokenResends = 0;
  /** Every access token a copy of this request was sent with: none is ever sent twice (one or two: a list). */
  const sentWith: string[] = [];
  let connectFailures = 0;
  /** The gateway's last 401 FAILED, which a newer token is being tried against. */
  let previous: ExchangeResult<C> | undefined;
  for (let n = 1; ; n++) {
    const attempt = events.attemptStarted(request, n);
    const bearer = token.accessToken;
    let copy: C;
    let sentAt: number;
    let outcome: SendOutcome;
    try {
      copy = await deps.sign(request, bearer, attempt?.context);
      sentAt = performance.now();
      outcome = await deps.gatewayClient.send({
        path: copy.path,
        headers: copy.headers,
        body: copy.body,
        end,
        checkAnswer: request.checkAnswer,
        beforeWrite: request.beforeWrite,
        trace: attempt?.context,
      });
    } catch (error) {
      events.attemptThrew(attempt, error);
      // This copy was never sent: the signer (HSM, KMS) could not sign, or the hook before the write refused it.
      // After a 401 FAILED the gateway's own answer is the true one (it did receive the first copy); before any
      // answer, nothing was sent. Anything else is a bug, answered sidecar.internal.
      if (error instanceof SidecarError) return previous ?? failed(error, attempts);
      throw error;
    }
    if (outcome.kind === 'not_sent') {
      events.attemptEnded(request, attempt, outcome, undefined, sentAt);
      const delay = backoffDelayMs(connectFailures++, 100, 2_000);
      // A refused, unresolvable or timed-out connection may heal; a certificate the sidecar does not trust
      // will not, so it is answered at once (still retryable: nothing was sent).
      // After a 401 FAILED, the gateway's own answer is the true one: the resend never left, the first copy did.
      const unreachable = () =>
        previous ?? failed(sidecarErrors.upstreamUnreachable(outcome.error), attempts, outcome.hop);
      if (!outcome.transient || performance.now() + delay >= giveUpAt || end.ended) return unreachable();
      events.retrying('connect_failed');
      try {
        await sleep(delay, undefined, { signal: end.signal });
      } catch {
        return unreachable();
      }
      continue;
    }
    attempts++;
    sentWith.push(bearer.reveal());
    if (outcome.kind === 'sent_no_answer') {
      events.attemptEnded(request, attempt, outcome, undefined, sentAt);
      const error = sidecarErrors.outcomeUnknown(outcome.timedOut ? 504 : 502, outcome.error);
      return failed(error, attempts, outcome.hop);
    }
    const { response } = outcome;
    const code = gatewayCode(response, bearer);
    const answered: ExchangeResult<C> = {
      kind: 'answered',
      response,
      gatewayCode: code,
      label: errorLabel(response.status, code),
      attempts,
      copy,
    };
    events.attemptEnded(request, attempt, outcome, answered, sentAt);
    if (!isTokenRejection(response.status, code) || tokenResends === maxTokenResends) return answered;
    previous = answered;
    tokenResends++;
    const wait = events.tokenWaitStarted(request.trace, true);
    try {
      token = await deps.tokens.tokenAfterRejection(token.generation, end.signal, wait.context);
      events.tokenWaitEnded(wait, undefined);
    } catch (error) {
      events.tokenWaitEnded(wait, error);
      // No fresh token to be had: the gateway's own 401 FAILED goes back. It is the true answer (the gateway
      // refused the token and did nothing), whereas a sidecar error would hide that the request did reach it.
      return answered;
    }
    // A token already refused for this request is never sent again (the manager gives a newer one; this says so).
    if (sentWith.includes(token.accessToken.reveal())) return answered;
    events.retrying('token_rejected');
  }
}

function failed<C>(error: unknown, attempts: number, hop?: CauseFamily): ExchangeResult<C> {
  return { kind: 'failed', error: asSidecarError(error), attempts, hop };
}
