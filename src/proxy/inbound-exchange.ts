import type { IncomingMessage, OutgoingHttpHeaders, ServerResponse } from 'node:http';
import type { SidecarError } from '../errors.js';
import { endAfterUnreadBody } from './lingering-close.js';
import type { RequestId } from './request-id.js';
import type { RequestOutcome } from './request-log.js';

/** Who wrote the client's answer: the handler, or shutdown for a request it could wait for no longer. */
export type AnsweredBy = 'handler' | 'shutdown';

interface Answer {
  readonly status: number;
  readonly code: string;
  readonly by: AnsweredBy;
}

/**
 * One client request from arrival to answer, owned by the connection tracker. A client gets exactly one answer:
 * whoever writes first (the handler, or shutdown) wins, and a later attempt is dropped. The request's log line
 * and metrics then describe the answer the client really got.
 */
export class InboundExchange {
  private answered: Answer | undefined;
  private sending = false;
  private clientClosed = false;

  constructor(
    readonly id: RequestId,
    private readonly res: ServerResponse,
    /** True once shutdown began: see write(). */
    private readonly draining: () => boolean = () => false,
    /** The request, whose body may still be arriving when an early answer is written (see write()). */
    private readonly req?: IncomingMessage,
  ) {
    res.once('close', () => (this.clientClosed = true));
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
    return this.answered !== undefined || this.res.headersSent;
  }

  /** Passes the gateway's answer on; false when the client was answered already. */
  answer(status: number, headers: OutgoingHttpHeaders, body: Buffer, code: string): boolean {
    return this.write({ status, code, by: 'handler' }, headers, body);
  }

  /** Answers with a sidecar error; `headers` may add e.g. Allow or Connection: close. */
  fail(error: SidecarError, by: AnsweredBy = 'handler', headers: OutgoingHttpHeaders = {}): boolean {
    const body = JSON.stringify(error.toBody());
    return this.write(
      { status: error.status, code: error.code, by },
      { ...headers, 'content-type': 'application/json' },
      body,
    );
  }

  /**
   * The outcome to log and count: the handler's own, unless shutdown answered first. Then status and code are
   * what the client got, and the handler's later view (a late gateway answer, say) is kept for reconciliation.
   */
  finalOutcome(handlerOutcome: RequestOutcome): RequestOutcome {
    const answered = this.answered;
    // The caller went away before its answer: the line must say so, for the payment may exist all the same.
    if (answered === undefined && this.clientClosed) return { ...handlerOutcome, delivered: false };
    if (answered === undefined || answered.by === 'handler') return handlerOutcome;
    return {
      ...handlerOutcome,
      status: answered.status,
      code: answered.code,
      causeCode: 'ERR_SIDECAR_SHUTDOWN',
      late: { status: handlerOutcome.status, code: handlerOutcome.code },
    };
  }

  private write(answer: Answer, headers: OutgoingHttpHeaders, body: Buffer | string): boolean {
    const { res } = this;
    if (this.answered !== undefined || res.headersSent) {
      // A half-written answer is cut rather than corrupted.
      if (!res.writableEnded) res.destroy();
      return false;
    }
    this.answered = answer;
    headers['x-request-id'] = this.id; // the sidecar's id wins over any the gateway sent
    // Decided when the answer is written, not when the request arrived: a request that came in before SIGTERM and
    // is answered after it must close its connection too, or its caller sends the next payment onto a socket that
    // is about to be cut, and gets no answer at all.
    if (this.draining()) headers.connection = 'close';
    // The whole body is in hand: without a length, writeHead (called before end) would make Node send it chunked.
    // 204 and 304 answers carry no body and must not carry a length either (RFC 9110 8.6).
    if (answer.status !== 204 && answer.status !== 304) headers['content-length'] = Buffer.byteLength(body);
    res.writeHead(answer.status, headers);
    // An answer written before the body was read (a 413, a refusal) must not be lost to a reset: lingering-close.ts.
    // Not shutdown's: it closes every connection right after answering, so its answer is ended at once.
    if (this.req && answer.by === 'handler') endAfterUnreadBody(this.req, res, body);
    else res.end(body);
    return true;
  }
}
