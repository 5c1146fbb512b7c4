import type { IncomingMessage, OutgoingHttpHeaders, ServerResponse } from 'node:http';
import { sidecarErrors, type SidecarError } from '../errors.js';
import type { IdempotencyKeeper, Ticket } from '../idempotency/keeper.js';
import type { IdempotencyKey } from '../idempotency/key.js';
import { errorAnswer, type KeptAnswer } from '../idempotency/record.js';
import { writeAnswer } from '../inbound/answer.js';
import type { Deadline, DeadlineList } from '../time/deadline-list.js';
import type { BodyBudget } from '../inbound/body-budget.js';
import type { InFlightRequest } from '../inbound/in-flight.js';
import type { RequestId } from '../inbound/request-id.js';
import type { Logger } from '../observability/log.js';
import type { SidecarMetrics } from '../observability/metrics.js';
import type { TraceSpan } from '../observability/tracing.js';
import type { RequestEnd } from '../upstream/gateway-send.js';
import { logRequest, type RequestOutcome } from './request-log.js';
import { endServerSpan } from './request-span.js';

/** Who settled the request first: the handler, or shutdown for a request it could wait for no longer. */
export type AnsweredBy = 'handler' | 'shutdown';

/** What the request's idempotency record keeps once the caller has its answer: it, or nothing (release). */
export type Keep = { readonly kind: 'store'; readonly answer: KeptAnswer } | { readonly kind: 'release' };

/** How a request ends: the answer the client gets, what its log line says, what its record keeps. */
export interface Settlement {
  readonly status: number;
  /** Metric label: ok, a sidecar.* code, or a bounded gateway error label. */
  readonly code: string;
  readonly headers: OutgoingHttpHeaders;
  readonly body: Buffer | string;
  readonly keep: Keep;
  /** The rest of the log line: attempts, cause, the gateway's code, the payload's digest, replayed. */
  readonly outcome: Omit<RequestOutcome, 'status' | 'code'>;
}

/** A sidecar error as a settlement; `headers` may add e.g. Allow or Connection: close. */
export function errorSettlement(
  error: SidecarError,
  outcome: Omit<RequestOutcome, 'status' | 'code'>,
  headers: OutgoingHttpHeaders = {},
): Settlement {
  return {
    status: error.status,
    code: error.code,
    headers: { ...headers, 'content-type': 'application/json' },
    body: JSON.stringify(error.toBody()),
    // An error that promises nothing was sent frees the key (a limit's refusal too: the same key may pay once the
    // window has room); any other is the key's answer.
    keep: error.nothingSent ? { kind: 'release' } : { kind: 'store', answer: errorAnswer(error) },
    outcome,
  };
}

/** What a request needs beyond itself to settle: shared by every request of the listener. */
export interface RequestParts {
  readonly log: Logger;
  readonly metrics: Pick<SidecarMetrics, 'requestDone'>;
  readonly keeper: Pick<IdempotencyKeeper, 'complete' | 'release'>;
  /** True once shutdown began: every answer then asks its client to close the connection. */
  readonly draining: () => boolean;
  /** Shared by the bodies of every request of the listener (body-budget.ts). */
  readonly bodyBudget: Pick<BodyBudget, 'release'>;
  /** The request deadline, from its arrival (docs/architecture.md, "The request deadline"): one timer for all. */
  readonly deadlines: DeadlineList;
}

/**
 * One client request from arrival to its one answer. It owns the request's state (its id, its key and claim,
 * whether it may have reached the gateway, who answered) and the end of its work (its deadline, or shutdown's
 * answer), which the token wait, the connection queue and the exchange all honour (RequestEnd). settle() is its end,
 * called by the handler when its work is done and by shutdown for a request it can wait for no longer: the first
 * settlement is what the client gets and what the idempotency record keeps; the handler's settlement, whenever it
 * comes, writes the record and the log line.
 */
export class EgressRequest implements InFlightRequest, RequestEnd {
  readonly started = performance.now();
  /** Resolves once the handler settled: the record is written and the line logged. */
  readonly done: Promise<void>;
  private readonly deadline: Deadline;
  /** Why the request's work ended (its deadline, or shutdown's answer); undefined while it goes on. */
  private endReason: unknown;
  /** Made only for a wait that takes a signal: most requests never wait (docs/performance.md). */
  private controller: AbortController | undefined;
  /** The send in flight, cut if the request ends meanwhile. */
  private cutSend: (() => void) | undefined;
  private key: IdempotencyKey | undefined;
  private ticket: Ticket | undefined;
  private sending = false;
  private first: { readonly settlement: Settlement; readonly by: AnsweredBy } | undefined;
  private clientClosed = false;
  /** The connection tracker's: told when the client's connection for this request closes. */
  private closeListener: (() => void) | undefined;
  /** The body's share of the listener's body budget, given back once the handler settled. */
  private bodyBytes = 0;
  private markDone: () => void = () => undefined;

  constructor(
    readonly id: RequestId,
    /** The route's metric label. */
    readonly route: string,
    private readonly req: IncomingMessage,
    private readonly res: ServerResponse,
    private readonly parts: RequestParts,
    /** The request's server span, when tracing is on: ended with the log line, its ids on that line. */
    readonly span?: TraceSpan,
  ) {
    // The listener's one timer for every deadline, left once the handler settled; no AbortSignal until a wait asks
    // for one: a signal and its listener are 1-2 KB of heap per request, more than the rest of the deadline.
    this.deadline = parts.deadlines.add(this);
    this.done = new Promise((resolve) => (this.markDone = resolve));
    // One listener for the request's own flag and the tracker's (a listener each cost a closure and once()'s wrapper).
    const onClose = (): void => {
      this.clientClosed = true;
      this.closeListener?.();
    };
    res.on('close', onClose);
  }

  /** Called at the request deadline: the request's work ends (the token wait, the connection queue, the send). */
  expire(): void {
    this.endWork(timeoutReason());
  }

  /** Whether the request's work has ended: at its deadline, or when shutdown answered it. */
  get ended(): boolean {
    return this.endReason !== undefined;
  }

  /** Aborted when the request's work ends, with the same reason; made when first asked for (by a wait). */
  get signal(): AbortSignal {
    if (this.controller === undefined) {
      this.controller = new AbortController();
      if (this.ended) this.controller.abort(this.endReason);
    }
    return this.controller.signal;
  }

  /** The send in flight sets `cut`, called if the request's work ends before it unsets it. */
  whileSending(cut: (() => void) | undefined): void {
    this.cutSend = cut;
  }

  private endWork(reason: unknown): void {
    if (this.ended) return;
    this.endReason = reason;
    this.controller?.abort(reason);
    this.cutSend?.();
  }

  /** The request's Idempotency-Key, once read. */
  useKey(key: IdempotencyKey): void {
    this.key = key;
  }

  /** The body's share of the body budget (body-budget.ts), released once the handler has settled. */
  holdBody(bytes: number): void {
    this.bodyBytes = bytes;
  }

  /** The claim on the key: from now on the record must be completed or released, which settle() does. */
  holdClaim(ticket: Ticket): void {
    this.ticket = ticket;
  }

  /**
   * Called right before the request is signed and sent; false when the client was answered already (by shutdown,
   * which told it nothing was sent): then it must not be sent at all.
   */
  beginSending(): boolean {
    if (this.isAnswered) return false;
    this.sending = true;
    return true;
  }

  /** Whether the request may have reached the gateway: decides what shutdown answers for it. */
  get sendStarted(): boolean {
    return this.sending;
  }

  get isAnswered(): boolean {
    return this.first !== undefined || this.res.headersSent;
  }

  /** Calls `listener` once the client's connection for this request is closed (one listener: the tracker's). */
  onClose(listener: () => void): void {
    this.closeListener = listener;
  }

  /**
   * Ends the request. Shutdown's settlement is written at once (its connection is about to close) and cuts the
   * request's work short; the handler's, when it comes, writes the record for the answer the client got, then the
   * log line and metrics, then the answer (the line is out before the answer: a kill right after the client has
   * its answer keeps it; the record is written before: a caller retrying at once finds it).
   */
  async settle(settlement: Settlement, by: AnsweredBy = 'handler'): Promise<void> {
    if (by === 'shutdown') {
      if (this.isAnswered) return;
      this.first = { settlement, by };
      this.write(settlement, by);
      this.endWork(sidecarErrors.shuttingDown());
      return;
    }
    const first = (this.first ??= { settlement, by });
    const outcome = this.outcome(first, settlement);
    try {
      if (this.ticket !== undefined) {
        const { keep } = first.settlement;
        await (keep.kind === 'release'
          ? this.parts.keeper.release(this.ticket)
          : this.parts.keeper.complete(this.ticket, keep.answer));
      }
      const durationMs = performance.now() - this.started;
      try {
        this.parts.metrics.requestDone(this.route, outcome.status, outcome.code, durationMs / 1000);
        logRequest(this.parts.log, this.id, this.route, durationMs, outcome, this.span?.context);
        if (this.span !== undefined)
          endServerSpan(this.span, outcome, { hasKey: this.key !== undefined, claimed: this.ticket !== undefined });
      } finally {
        if (first.by === 'handler') this.write(settlement, by);
      }
    } finally {
      this.parts.deadlines.remove(this.deadline);
      if (this.bodyBytes > 0) this.parts.bodyBudget.release(this.bodyBytes);
      this.markDone();
    }
  }

  /** The line's outcome: what the client got; the handler's own view beside it when shutdown answered first. */
  private outcome(first: { settlement: Settlement; by: AnsweredBy }, handler: Settlement): RequestOutcome {
    // One copy for the common case; the rare ones below add to it.
    // Not `{ ...outcome, status, ... }`: on Node 20 a spread followed by more properties is a dictionary, about
    // 1 KB of heap a request (docs/performance.md).
    const own: RequestOutcome = Object.assign({}, handler.outcome, {
      status: handler.status,
      code: handler.code,
      idempotencyKeySha256: this.key?.sha256,
    });
    if (first.by === 'shutdown') {
      const late = { status: own.status, code: own.code };
      const { status, code } = first.settlement;
      return { ...own, status, code, causeCode: 'ERR_SIDECAR_SHUTDOWN', late };
    }
    // The caller went away before its answer: the line must say so, for the payment may exist all the same.
    if (this.clientClosed && !this.res.headersSent) return { ...own, delivered: false };
    return own;
  }

  private write(settlement: Settlement, by: AnsweredBy): void {
    // A copy: the settlement's headers may be an idempotency record's, kept for the next replay.
    // (Object.assign, not a spread: see outcome().)
    const headers: OutgoingHttpHeaders = Object.assign({}, settlement.headers);
    headers['x-request-id'] = this.id;
    // Decided when the answer is written, not when the request arrived: a request that came in before SIGTERM and
    // is answered after it must close its connection too, or its caller sends the next payment onto a socket that
    // is about to be cut, and gets no answer at all.
    if (this.parts.draining()) headers.connection = 'close';
    // An answer written before the body was read (a 413, a refusal) must not be lost to a reset (inbound/answer.ts).
    // Not shutdown's: it closes every connection right after answering, so its answer is ended at once.
    const ending = by === 'handler' ? 'after-unread-body' : 'now';
    writeAnswer(this.req, this.res, { status: settlement.status, headers, body: settlement.body }, ending);
  }
}

/** What AbortSignal.timeout() aborts with, so that the deadline reads the same to whatever checks the reason. */
function timeoutReason(): DOMException {
  return new DOMException('The operation was aborted due to timeout', 'TimeoutError');
}
