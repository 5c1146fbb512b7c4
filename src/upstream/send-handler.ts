import type { Dispatcher } from 'undici';
import type { Deadline, DeadlineList, Expiring } from '../time/deadline-list.js';
import type { UpstreamResponse } from './gateway-answer.js';
import { notSent, sentNoAnswer, type RequestEnd, type SendOutcome } from './gateway-send.js';
import {
  causeCode,
  errorCode,
  isTimeout,
  isTransientConnectError,
  upstreamErrors,
  UpstreamError,
} from './upstream-errors.js';

/** RFC 9110 15: the highest status an answer may carry. */
const MAX_STATUS = 599;

/**
 * One request's life in undici. It settles exactly once: with the final answer, or with whether the failure came
 * before any byte was written. undici calls onRequestStart on a connected socket right before it writes the
 * first byte, so "sent or not" is decided by that moment, never guessed from an error code.
 */
export class SendHandler implements Dispatcher.DispatchHandler, Expiring {
  private started = false;
  private controller: Dispatcher.DispatchController | undefined;
  private status = 0;
  private headers: Record<string, string | string[]> = {};
  private readonly chunks: Buffer[] = [];
  private size = 0;
  private timeout: Deadline | undefined;

  constructor(
    private readonly settle: (outcome: SendOutcome) => void,
    /** The response timeouts of the client's sends, from each one's first byte. */
    private readonly timeouts: DeadlineList,
    private readonly maxBytes: number,
    /** The request's end: see UpstreamRequest.end. */
    private readonly end?: RequestEnd,
  ) {}

  onRequestStart(controller: Dispatcher.DispatchController): void {
    const { end } = this;
    // Aborted here, nothing is written: undici checks for an abort before it writes the first byte.
    if (end?.ended) return controller.abort(upstreamErrors.requestEnded());
    this.started = true;
    this.controller = controller;
    this.timeout = this.timeouts.add(this);
    end?.whileSending(() => controller.abort(upstreamErrors.requestEnded()));
  }

  /** The response timeout, from the first byte written: the answer is cut (sent, no answer). */
  expire(): void {
    this.controller?.abort(upstreamErrors.responseTimeout());
  }

  onResponseStart(
    controller: Dispatcher.DispatchController,
    statusCode: number,
    headers: Record<string, string | string[] | undefined>,
  ): void {
    // llhttp takes any three digits; undici refuses a status below 100 itself (causeCode), not one above 599. Such
    // an answer is not passed on: it came after the request was written, so it ends as sent, no answer.
    if (statusCode > MAX_STATUS) return controller.abort(upstreamErrors.malformedAnswer(`status ${statusCode}`));
    // RFC 9110 15.2: interim answers (103 Early Hints and the like) come before the final one and are skipped;
    // undici hands them to the handler. An unsolicited 100 never gets here (see interim-continue.ts).
    if (statusCode < 200) return;
    this.status = statusCode;
    this.headers = definedHeaders(headers);
  }

  onResponseData(controller: Dispatcher.DispatchController, chunk: Buffer): void {
    this.size += chunk.length;
    if (this.size > this.maxBytes) controller.abort(upstreamErrors.tooLarge(this.maxBytes));
    else this.chunks.push(chunk);
  }

  onResponseEnd(): void {
    const response: UpstreamResponse = {
      status: this.status,
      headers: this.headers,
      body: Buffer.concat(this.chunks, this.size),
    };
    this.finish({ kind: 'response', response });
  }

  onResponseError(_controller: Dispatcher.DispatchController, error: Error): void {
    if (!this.started) this.finish(notSent(error, isTransientConnectError(error)));
    else this.finish(sentNoAnswer(withCauseCode(error), isTimeout(error)));
  }

  private finish(outcome: SendOutcome): void {
    if (this.timeout !== undefined) this.timeouts.remove(this.timeout);
    if (this.started) this.end?.whileSending(undefined);
    this.settle(outcome);
  }
}

/** A malformed answer's error gets the code the log line names (causeCode), so the line can say why. */
function withCauseCode(error: Error): Error {
  const code = causeCode(error);
  return code === errorCode(error) ? error : new UpstreamError(code, error.message);
}

function definedHeaders(raw: Record<string, string | string[] | undefined>): Record<string, string | string[]> {
  // undici makes a fresh object per answer, seldom with an undefined value: without one it is kept, not copied.
  let complete = true;
  for (const name in raw) if (raw[name] === undefined) complete = false;
  if (complete) return raw as Record<string, string | string[]>;
  const out: Record<string, string | string[]> = {};
  for (const name of Object.keys(raw)) {
    const value = raw[name];
    if (value !== undefined) out[name] = value;
  }
  return out;
}
