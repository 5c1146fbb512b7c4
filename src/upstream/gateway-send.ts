import type { CauseFamily } from '../observability/metric-names.js';
import type { TraceContext } from '../observability/tracing.js';
import type { AnswerCheck, UpstreamResponse } from './gateway-answer.js';
import { causeFamily } from './upstream-errors.js';

// One send to the gateway: what goes in and what comes out, whichever GatewayClient (gateway-client.ts) makes it.

export interface UpstreamRequest {
  /** Path and query for the request line (already prefixed with the base path). */
  readonly path: string;
  readonly headers: Record<string, string>;
  readonly body: string;
  /**
   * Checked on a complete answer before its connection is offered to another request. An error means the answer
   * cannot belong to this request (a stray copy of an earlier one): the connection is destroyed and the send ends
   * as sent_no_answer with that error.
   */
  readonly checkAnswer?: AnswerCheck | undefined;
  /**
   * Runs once a connection is lent to this send (past the wait for a free one) and right before the send is handed
   * to it: nothing of the request is written yet. A kept-alive connection is up already; a new one is connected by
   * undici after this, and a failure there is still not_sent. Rejecting refuses the send: nothing is written, the
   * connection goes back unused, and send() rejects with the same reason.
   */
  readonly beforeWrite?: (() => Promise<void>) | undefined;
  /**
   * The end of the request (its deadline, or shutdown's answer): ended while waiting for a connection or before the
   * first byte is written, the send is not made; ended afterwards, it is cut, sent with no answer
   * (ERR_REQUEST_DEADLINE).
   */
  readonly end?: RequestEnd | undefined;
  /** The span of this attempt: a wait for a free connection is traced under it. */
  readonly trace?: TraceContext | undefined;
}

/**
 * The one question that decides whether a failure may be retried: did any byte of the request leave?
 * `not_sent`: the connection never came up (refused, DNS, TLS handshake, connect timeout): safe to retry.
 * `sent_no_answer`: the request was being written or was written: the gateway may have acted on it.
 * A failure says which hop failed (`hop`: upstream-errors.ts, causeFamily), for the metrics and the request's log line.
 */
export type SendOutcome =
  | { readonly kind: 'response'; readonly response: UpstreamResponse }
  /** `transient`: a network failure that may heal (refused, DNS, timeout); false for e.g. an untrusted certificate. */
  | { readonly kind: 'not_sent'; readonly error: Error; readonly transient: boolean; readonly hop: CauseFamily }
  | { readonly kind: 'sent_no_answer'; readonly error: Error; readonly timedOut: boolean; readonly hop: CauseFamily };

export type SendFailure = Exclude<SendOutcome, { kind: 'response' }>;

/** A send that failed before any byte left. */
export function notSent(error: Error, transient: boolean): SendFailure {
  return { kind: 'not_sent', error, transient, hop: causeFamily(error) };
}

/** A send that failed after bytes may have left: the gateway may have acted on it. */
export function sentNoAnswer(error: Error, timedOut: boolean): SendFailure {
  return { kind: 'sent_no_answer', error, timedOut, hop: causeFamily(error) };
}

/**
 * The end of the request a send is for: its deadline, or shutdown's answer. An AbortSignal says the same, but a
 * signal and a listener on it cost 1-2 KB of heap per request (docs/performance.md): the proxy's requests are one
 * of these instead (egress/request.ts), and endOf() makes one of a signal.
 */
export interface RequestEnd {
  /** True once the request has ended: nothing more is sent for it. */
  readonly ended: boolean;
  /** A signal that aborts when the request ends, for a wait that takes one (made when first asked for). */
  readonly signal: AbortSignal;
  /** Calls `cut` if the request ends while it is set; one at a time, undefined unsets it. */
  whileSending(cut: (() => void) | undefined): void;
}

/** A RequestEnd that ends when `signal` aborts. */
export function endOf(signal: AbortSignal): RequestEnd {
  let current: (() => void) | undefined;
  return {
    get ended() {
      return signal.aborted;
    },
    signal,
    whileSending: (cut) => {
      if (current !== undefined) signal.removeEventListener('abort', current);
      current = cut;
      if (cut !== undefined) signal.addEventListener('abort', cut, { once: true });
    },
  };
}

/** The largest answer head accepted (Node's own default): a larger one is refused, not passed on. */
export const MAX_HEAD_BYTES = 16 * 1024;
