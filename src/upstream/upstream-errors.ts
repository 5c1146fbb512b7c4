// The failures of one send to the gateway, told apart by their stable codes: which hop failed, whether a failure before
// any byte left may heal, and the code a log line names.
import type { CauseFamily } from '../observability/metric-names.js';

/** The cause code of every malformed gateway answer, whoever found it (undici's parser or the sidecar). */
const MALFORMED_ANSWER = 'ERR_GATEWAY_MALFORMED_ANSWER';

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

export const upstreamErrors = {
  /** The gateway client is closing or was destroyed: nothing was sent, and retrying will not help. */
  closed: (message: string) => new UpstreamError('ERR_FORWARDER_CLOSED', message),
  /** Every connection stayed busy past connectTimeoutMs: nothing was sent, and the retry loop may sign afresh. */
  poolTimeout: () => new UpstreamError('ERR_GATEWAY_POOL_TIMEOUT', 'no gateway connection free in time'),
  responseTimeout: () => new UpstreamError('ERR_GATEWAY_RESPONSE_TIMEOUT', 'gateway did not answer in time'),
  /** The request's own deadline passed, or shutdown ended it, before the gateway answered. */
  requestEnded: () => new UpstreamError('ERR_REQUEST_DEADLINE', 'the request ended before the gateway answered'),
  tooLarge: (limit: number) =>
    new UpstreamError('ERR_GATEWAY_RESPONSE_TOO_LARGE', `gateway answer exceeds ${limit} bytes`),
  answerMismatch: (field: string) =>
    new UpstreamError('ERR_GATEWAY_ANSWER_MISMATCH', `the answer's ${field} is not the request's: a stray answer`),
  /** An answer undici parsed but HTTP does not allow (RFC 9110 15: a status is 100 to 599). */
  malformedAnswer: (what: string) => new UpstreamError(MALFORMED_ANSWER, `malformed gateway answer: ${what}`),
} as const;

/**
 * Failures of the forward proxy hop (docs/operations.md, "Egress through a forward proxy"). Each one happens before
 * the tunnel carries the gateway's TLS, so nothing of the request was sent, and each may heal (a rotated forward
 * proxy password, a forward proxy restarted, an ACL fixed): all are retried within the connect retry deadline.
 */
export const forwardProxyErrors = {
  /** No connection to the forward proxy, or it closed before answering the CONNECT. */
  unreachable: (detail: string) =>
    new UpstreamError('ERR_PROXY_UNREACHABLE', `could not reach the forward proxy (${detail})`),
  /** 407: the forward proxy wants (other) credentials. */
  authRequired: () =>
    new UpstreamError('ERR_PROXY_AUTH_REQUIRED', 'the forward proxy refused the CONNECT: 407 authentication required'),
  /** Any other answer to the CONNECT than 2xx: 403 (its policy), 502/503/504 (it could not reach the gateway). */
  refused: (status: number) =>
    status === 407
      ? forwardProxyErrors.authRequired()
      : new ProxyRefusal(status, `the forward proxy refused the CONNECT to the gateway: ${status}`),
  /** The tunnel was up and closed before TLS with the gateway was established through it. */
  tunnelClosed: (detail: string) =>
    new UpstreamError('ERR_PROXY_TUNNEL_CLOSED', `the tunnel through the forward proxy closed before TLS (${detail})`),
  timeout: (ms: number, waitingFor: string) =>
    new UpstreamError('ERR_PROXY_CONNECT_TIMEOUT', `no tunnel through the forward proxy in ${ms} ms (${waitingFor})`),
} as const;

/** A CONNECT answered with a status other than 2xx and 407: the status is kept for `check`. */
export class ProxyRefusal extends UpstreamError {
  constructor(
    readonly status: number,
    message: string,
  ) {
    super('ERR_PROXY_REFUSED', message);
  }
}

/** The status of the proxy's answer to a refused CONNECT, when the error is one. */
export function proxyStatus(error: unknown): number | undefined {
  if (error instanceof ProxyRefusal) return error.status;
  return errorCode(error) === 'ERR_PROXY_AUTH_REQUIRED' ? 407 : undefined;
}

/**
 * Which hop a failure belongs to, for metrics and logs: `proxy` (ERR_PROXY_*: the forward proxy or its tunnel),
 * `sidecar` (closing, no free connection), or `gateway` (anything else: the gateway, or the network to it; once
 * the tunnel carries the gateway's TLS, a connection cut cannot be told apart from the gateway's own).
 */

export function causeFamily(error: unknown): CauseFamily {
  const code = errorCode(error) ?? '';
  if (code.startsWith('ERR_PROXY_')) return 'proxy';
  if (code === 'ERR_FORWARDER_CLOSED' || code === 'ERR_GATEWAY_POOL_TIMEOUT') return 'sidecar';
  return 'gateway';
}

// Connection failures worth retrying within the deadline. TLS verification failures (wrong CA, name mismatch,
// expired certificate) and undici argument errors are not: retrying only delays the answer.
const TRANSIENT_CONNECT_CODES = new Set([
  'ECONNREFUSED',
  'ECONNRESET',
  'EPIPE',
  'ETIMEDOUT',
  'EHOSTUNREACH',
  'ENETUNREACH',
  'EHOSTDOWN',
  'ENETDOWN',
  'EAI_AGAIN',
  'ENOTFOUND',
  'EADDRNOTAVAIL',
  'UND_ERR_CONNECT_TIMEOUT',
  'UND_ERR_SOCKET',
  'UND_ERR_CLOSED',
  'ERR_PROXY_UNREACHABLE',
  'ERR_PROXY_AUTH_REQUIRED',
  'ERR_PROXY_REFUSED',
  'ERR_PROXY_TUNNEL_CLOSED',
  'ERR_PROXY_CONNECT_TIMEOUT',
]);

export function isTransientConnectError(error: Error): boolean {
  const code = errorCode(error);
  return code !== undefined && TRANSIENT_CONNECT_CODES.has(code);
}

/** Only the error's code (never its message, which may quote values) is fit for logs. */
export function errorCode(error: unknown): string | undefined {
  const code = (error as { code?: unknown } | undefined)?.code;
  return typeof code === 'string' ? code.slice(0, 64) : undefined;
}

/**
 * The code a log line names for a failed exchange: the error's own, or a stable one of ours for a malformed answer
 * that undici reports without a telling code: a parser error with none, or an assertion of its own that the answer
 * broke (a status line below 100 does). Never undefined, so every outcome_unknown line says why.
 */
export function causeCode(error: Error): string {
  const code = errorCode(error);
  if (code === 'ERR_ASSERTION' || (code === undefined && error.name === 'HTTPParserError')) {
    return MALFORMED_ANSWER;
  }
  return code ?? 'ERR_GATEWAY_UNKNOWN';
}

export function isTimeout(error: Error): boolean {
  const code = errorCode(error);
  return code === 'ERR_GATEWAY_RESPONSE_TIMEOUT' || code === 'ERR_REQUEST_DEADLINE';
}
