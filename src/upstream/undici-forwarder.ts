import { Pool, type Dispatcher } from 'undici';
import type { BaseAddress } from '../config/base-url.js';
import {
  DEFAULT_KEEP_ALIVE_MS,
  DEFAULT_MAX_RESPONSE_BYTES,
  forwarderClosed,
  KEEP_ALIVE_HINT_MARGIN_MS,
  isTimeout,
  isTransientConnectError,
  poolTimeout,
  ResponseTimeoutError,
  type UpstreamError,
  type Forwarder,
  type ForwarderOptions,
  type SendOutcome,
  type UpstreamRequest,
} from './outcome.js';
import { ResponseTooLargeError } from './response-parser.js';
import { trustedCas } from './trusted-cas.js';

/**
 * The same forwarder on undici's Pool (SIDECAR_UPSTREAM_CLIENT=undici): the fallback if a gateway ever answers in a
 * way the native client refuses. Both pass the same contract tests. undici would queue requests beyond its
 * connections without a deadline, so at most `connections` are handed to it and the rest wait here, under the
 * native client's rule: past connectTimeoutMs a waiting request is not_sent, to be signed afresh.
 */
export function createUndiciForwarder(base: BaseAddress, options: ForwarderOptions): Forwarder {
  const pool = new Pool(base.origin, {
    connections: options.connections,
    pipelining: 1,
    connect: { timeout: options.connectTimeoutMs, ...(options.ca === undefined ? {} : { ca: trustedCas(options.ca) }) },
    // A request written to a socket that the gateway is closing for idleness ends as outcome_unknown: keeping
    // idle sockets for less time than the gateway does makes that race rare. undici takes a Keep-Alive hint
    // instead of keepAliveTimeout, capped by keepAliveMaxTimeout: both carry the setting, as in the native client.
    keepAliveTimeout: options.keepAliveTimeoutMs ?? DEFAULT_KEEP_ALIVE_MS,
    keepAliveMaxTimeout: options.keepAliveTimeoutMs ?? DEFAULT_KEEP_ALIVE_MS,
    keepAliveTimeoutThreshold: KEEP_ALIVE_HINT_MARGIN_MS,
    headersTimeout: options.responseTimeoutMs,
    bodyTimeout: options.responseTimeoutMs,
  });
  const maxBytes = options.maxResponseBytes ?? DEFAULT_MAX_RESPONSE_BYTES;
  const admission = new Admission(options.connections, options.connectTimeoutMs);
  const dispatch = (request: UpstreamRequest): Promise<SendOutcome> => sendOnce(pool, request, options.responseTimeoutMs, maxBytes);
  return {
    send: (request) => admission.run(() => dispatch(request)),
    close: async () => {
      await admission.drain();
      await pool.close();
    },
    destroy: () => {
      admission.refuseWaiting();
      return pool.destroy();
    },
  };
}

interface Waiter {
  readonly start: () => void;
  readonly refuse: (error: UpstreamError, transient: boolean) => void;
  readonly timer: NodeJS.Timeout;
}

/** At most `limit` sends at once; the others wait in order, each for at most `deadlineMs`. */
class Admission {
  private running = 0;
  private readonly waiting: Waiter[] = [];
  private readonly drained: (() => void)[] = [];
  private closing = false;

  constructor(
    private readonly limit: number,
    private readonly deadlineMs: number,
  ) {}

  run(send: () => Promise<SendOutcome>): Promise<SendOutcome> {
    if (this.closing) return Promise.resolve(notSent(forwarderClosed('the forwarder is closing'), false));
    if (this.running < this.limit) return this.start(send);
    return new Promise<SendOutcome>((resolve) => {
      const waiter: Waiter = {
        start: () => void this.start(send).then(resolve),
        refuse: (error, transient) => resolve(notSent(error, transient)),
        timer: setTimeout(() => {
          this.waiting.splice(this.waiting.indexOf(waiter), 1);
          waiter.refuse(poolTimeout(), true);
          this.settleDrain();
        }, this.deadlineMs),
      };
      this.waiting.push(waiter);
    });
  }

  drain(): Promise<void> {
    this.closing = true;
    return new Promise<void>((resolve) => {
      this.drained.push(resolve);
      this.settleDrain();
    });
  }

  refuseWaiting(): void {
    this.closing = true;
    for (const waiter of this.waiting.splice(0)) {
      clearTimeout(waiter.timer);
      waiter.refuse(forwarderClosed('the forwarder was destroyed'), false);
    }
    this.settleDrain();
  }

  private async start(send: () => Promise<SendOutcome>): Promise<SendOutcome> {
    this.running++;
    try {
      return await send();
    } finally {
      this.running--;
      const next = this.waiting.shift();
      if (next !== undefined) {
        clearTimeout(next.timer);
        next.start();
      }
      this.settleDrain();
    }
  }

  private settleDrain(): void {
    if (this.running > 0 || this.waiting.length > 0) return;
    for (const resolve of this.drained.splice(0)) resolve();
  }
}

function notSent(error: UpstreamError, transient: boolean): SendOutcome {
  return { kind: 'not_sent', error, transient };
}

function sendOnce(pool: Pool, request: UpstreamRequest, timeoutMs: number, maxBytes: number): Promise<SendOutcome> {
  return new Promise<SendOutcome>((resolve) => {
    pool.dispatch(
      { method: 'POST', path: request.path, headers: request.headers, body: request.body, idempotent: false },
      new UndiciExchange(resolve, timeoutMs, maxBytes),
    );
  });
}

/**
 * One request's life in undici, as a class rather than five closures: it is created for every request.
 * It settles exactly once, with the answer or with whether the failure came before any byte was written.
 */
class UndiciExchange implements Dispatcher.DispatchHandler {
  private started = false;
  private status = 0;
  private headers: Record<string, string | string[]> = {};
  private readonly chunks: Buffer[] = [];
  private size = 0;
  private timer: NodeJS.Timeout | undefined;

  constructor(
    private readonly resolve: (outcome: SendOutcome) => void,
    private readonly timeoutMs: number,
    private readonly maxBytes: number,
  ) {}

  // Called by undici on a connected socket right before the first byte is written (client-h1 writeH1).
  onRequestStart(controller: Dispatcher.DispatchController): void {
    this.started = true;
    this.timer = setTimeout(() => controller.abort(new ResponseTimeoutError('gateway did not answer in time')), this.timeoutMs);
  }

  onResponseStart(_controller: Dispatcher.DispatchController, statusCode: number, headers: Record<string, string | string[] | undefined>): void {
    this.status = statusCode;
    this.headers = normaliseHeaders(headers);
  }

  onResponseData(controller: Dispatcher.DispatchController, chunk: Buffer): void {
    this.size += chunk.length;
    if (this.size > this.maxBytes) controller.abort(new ResponseTooLargeError(`gateway response exceeds ${this.maxBytes} bytes`));
    else this.chunks.push(chunk);
  }

  onResponseEnd(): void {
    this.settle({ kind: 'response', response: { status: this.status, headers: this.headers, body: Buffer.concat(this.chunks, this.size) } });
  }

  onResponseError(_controller: Dispatcher.DispatchController, error: Error): void {
    if (!this.started) this.settle({ kind: 'not_sent', error, transient: isTransientConnectError(error) });
    else this.settle({ kind: 'sent_no_answer', error, timedOut: isTimeout(error) });
  }

  private settle(outcome: SendOutcome): void {
    clearTimeout(this.timer);
    this.resolve(outcome);
  }
}

function normaliseHeaders(raw: Record<string, string | string[] | undefined>): Record<string, string | string[]> {
  const out: Record<string, string | string[]> = {};
  for (const name of Object.keys(raw)) {
    const value = raw[name];
    if (value !== undefined) out[name] = value;
  }
  return out;
}
