import type { UpstreamClient } from '../config/config.js';

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
  /** `native` unless set: see createForwarder. */
  readonly client?: UpstreamClient;
}

export const DEFAULT_MAX_RESPONSE_BYTES = 8 * 1024 * 1024;
export const DEFAULT_KEEP_ALIVE_MS = 4_000;
/** A Keep-Alive hint is the gateway's own idle timeout: a socket is not reused this close to its end. */
export const KEEP_ALIVE_HINT_MARGIN_MS = 1_000;

/** A failure of the gateway hop, told apart by its stable `code` (logs carry the code, never the message). */
export class UpstreamError extends Error {
  constructor(
    readonly code: string,
    message: string,
  ) {
    super(message);
    this.name = new.target.name;
  }
}

/** The forwarder is closing or was destroyed: nothing was sent, and retrying will not help. */
export const forwarderClosed = (message: string): UpstreamError => new UpstreamError('ERR_FORWARDER_CLOSED', message);

/** Every connection stayed busy past connectTimeoutMs: nothing was sent, and the retry loop may sign afresh. */
export const poolTimeout = (): UpstreamError => new UpstreamError('ERR_GATEWAY_POOL_TIMEOUT', 'no gateway connection free in time');

export class ResponseTimeoutError extends UpstreamError {
  constructor(message: string) {
    super('ERR_GATEWAY_RESPONSE_TIMEOUT', message);
  }
}

export interface Forwarder {
  send(request: UpstreamRequest): Promise<SendOutcome>;
  /** Waits for requests in flight, then closes. */
  close(): Promise<void>;
  /** Aborts requests in flight (sent_no_answer; those not yet written get not_sent) and closes. */
  destroy(): Promise<void>;
}

// Connection failures worth retrying within the deadline. TLS verification failures (wrong CA, name mismatch,
// expired certificate) and undici argument errors are not: retrying only delays the answer.
const TRANSIENT_CONNECT_CODES = new Set([
  'ECONNREFUSED', 'ECONNRESET', 'EPIPE', 'ETIMEDOUT', 'EHOSTUNREACH', 'ENETUNREACH', 'EHOSTDOWN', 'ENETDOWN',
  'EAI_AGAIN', 'ENOTFOUND', 'EADDRNOTAVAIL', 'ERR_GATEWAY_CONNECT_TIMEOUT', 'ERR_GATEWAY_CLOSED_CONNECTING',
  'UND_ERR_CONNECT_TIMEOUT', 'UND_ERR_SOCKET', 'UND_ERR_CLOSED',
]);

export function isTransientConnectError(error: Error): boolean {
  const code = (error as { code?: string }).code;
  return code !== undefined && TRANSIENT_CONNECT_CODES.has(code);
}

/** Only the error's code (never its message, which may quote values) is fit for logs. */
export function errorCode(error: unknown): string | undefined {
  const code = (error as { code?: unknown } | undefined)?.code;
  return typeof code === 'string' ? code.slice(0, 64) : undefined;
}

export function isTimeout(error: Error): boolean {
  const code = (error as { code?: string }).code;
  return (
    error instanceof ResponseTimeoutError || code === 'UND_ERR_HEADERS_TIMEOUT' || code === 'UND_ERR_BODY_TIMEOUT'
  );
}
