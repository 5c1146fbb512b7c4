import { Pool, type Dispatcher } from 'undici';
import type { BaseAddress } from '../config/base-url.js';
import { trustedCas } from './trusted-cas.js';

export interface UpstreamRequest {
  /** Path and query for the request line (already prefixed with the base path). */
  readonly path: string;
  readonly headers: Record<string, string>;
  readonly body: string;
}

export interface UpstreamResponse {
  readonly status: number;
  readonly headers: Record<string, string | string[]>;
  readonly body: Buffer;
}

/**
 * The one question that decides whether a failure may be retried: did any byte of the request leave?
 * `not_sent`: the connection never came up (refused, DNS, TLS handshake, connect timeout): safe to retry.
 * `sent_no_answer`: the request was being written or was written: the gateway may have acted on it.
 */
export type SendOutcome =
  | { readonly kind: 'response'; readonly response: UpstreamResponse }
  /** `transient`: a network failure that may heal (refused, DNS, timeout); false for e.g. an untrusted certificate. */
  | { readonly kind: 'not_sent'; readonly error: Error; readonly transient: boolean }
  | { readonly kind: 'sent_no_answer'; readonly error: Error; readonly timedOut: boolean };

export interface ForwarderOptions {
  readonly ca: string | undefined;
  readonly connectTimeoutMs: number;
  readonly responseTimeoutMs: number;
  readonly connections: number;
  readonly keepAliveTimeoutMs?: number;
  /** Gateway answers are small JSON; a cap keeps a misbehaving upstream from exhausting memory. */
  readonly maxResponseBytes?: number;
}

const DEFAULT_MAX_RESPONSE_BYTES = 8 * 1024 * 1024;

export class ResponseTimeoutError extends Error {
  override readonly name = 'ResponseTimeoutError';
}

export interface Forwarder {
  send(request: UpstreamRequest): Promise<SendOutcome>;
  /** Waits for requests in flight, then closes. */
  close(): Promise<void>;
  /** Aborts requests in flight (their senders get sent_no_answer) and closes. */
  destroy(): Promise<void>;
}

/** A keep-alive pool to the one configured origin; nothing else is ever reachable through it. */
export function createForwarder(base: BaseAddress, options: ForwarderOptions): Forwarder {
  const pool = new Pool(base.origin, {
    connections: options.connections,
    pipelining: 1,
    connect: { timeout: options.connectTimeoutMs, ...(options.ca === undefined ? {} : { ca: trustedCas(options.ca) }) },
    // A request written to a socket that the gateway is closing for idleness ends as outcome_unknown: keeping
    // idle sockets for less time than the gateway does makes that race rare (undici also honours Keep-Alive hints).
    ...(options.keepAliveTimeoutMs === undefined ? {} : { keepAliveTimeout: options.keepAliveTimeoutMs }),
    headersTimeout: options.responseTimeoutMs,
    bodyTimeout: options.responseTimeoutMs,
  });
  const maxBytes = options.maxResponseBytes ?? DEFAULT_MAX_RESPONSE_BYTES;
  return {
    send: (request) => sendOnce(pool, request, options.responseTimeoutMs, maxBytes),
    close: () => pool.close(),
    destroy: () => pool.destroy(),
  };
}

function sendOnce(pool: Pool, request: UpstreamRequest, timeoutMs: number, maxBytes: number): Promise<SendOutcome> {
  return new Promise<SendOutcome>((resolve) => {
    pool.dispatch(
      { method: 'POST', path: request.path, headers: request.headers, body: request.body, idempotent: false },
      new Exchange(resolve, timeoutMs, maxBytes),
    );
  });
}

/**
 * One request's life in undici, as a class rather than five closures: it is created for every request.
 * It settles exactly once, with the answer or with whether the failure came before any byte was written.
 */
class Exchange implements Dispatcher.DispatchHandler {
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
    if (this.size > this.maxBytes) controller.abort(new Error(`gateway response exceeds ${this.maxBytes} bytes`));
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

// Connection failures worth retrying within the deadline. TLS verification failures (wrong CA, name mismatch,
// expired certificate) and undici argument errors are not: retrying only delays the answer.
const TRANSIENT_CONNECT_CODES = new Set([
  'ECONNREFUSED', 'ECONNRESET', 'EPIPE', 'ETIMEDOUT', 'EHOSTUNREACH', 'ENETUNREACH', 'EHOSTDOWN', 'ENETDOWN',
  'EAI_AGAIN', 'ENOTFOUND', 'EADDRNOTAVAIL', 'UND_ERR_CONNECT_TIMEOUT', 'UND_ERR_SOCKET', 'UND_ERR_CLOSED',
]);

function isTransientConnectError(error: Error): boolean {
  const code = (error as { code?: string }).code;
  return code !== undefined && TRANSIENT_CONNECT_CODES.has(code);
}

/** Only the error's code (never its message, which may quote values) is fit for logs. */
export function errorCode(error: unknown): string | undefined {
  const code = (error as { code?: unknown } | undefined)?.code;
  return typeof code === 'string' ? code.slice(0, 64) : undefined;
}

function isTimeout(error: Error): boolean {
  const code = (error as { code?: string }).code;
  return (
    error instanceof ResponseTimeoutError || code === 'UND_ERR_HEADERS_TIMEOUT' || code === 'UND_ERR_BODY_TIMEOUT'
  );
}

function normaliseHeaders(raw: Record<string, string | string[] | undefined>): Record<string, string | string[]> {
  const out: Record<string, string | string[]> = {};
  for (const name of Object.keys(raw)) {
    const value = raw[name];
    if (value !== undefined) out[name] = value;
  }
  return out;
}
