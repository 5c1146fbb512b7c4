import { ConfigError } from '../errors.js';
import { settingName } from './schema.js';

// Which client headers travel to the gateway: an allow-list. A deny-list let through whatever it did not foresee
// (True-Client-IP, X-Original-URL, X-HTTP-Method-Override, ...): unsigned headers that a gateway, or a CDN or WAF in
// front of it, may act on. The gateway needs none of the client's headers; these few are harmless and useful in
// its logs. X-Request-Id is the sidecar's own (the client's when it is a sane token: inbound/request-id.ts).
export const DEFAULT_FORWARDED_REQUEST_HEADERS = ['accept', 'accept-language', 'user-agent', 'x-request-id'] as const;

/** RFC 9110 7.6.1 hop-by-hop headers: never forwarded either way. */
export const HOP_BY_HOP = [
  'connection',
  'keep-alive',
  'proxy-connection',
  'proxy-authenticate',
  'proxy-authorization',
  'te',
  'trailer',
  'transfer-encoding',
  'upgrade',
] as const;

/**
 * Names SIDECAR_FORWARD_REQUEST_HEADERS may not list: the sidecar alone authenticates, signs, frames the body and
 * chooses the destination; session cookies and the cluster's addresses have no business at a third party; the
 * Idempotency-Key is the sidecar's own protocol (docs/idempotency.md); trace context is the sidecar's to send
 * (SIDECAR_TRACE_PROPAGATE_UPSTREAM), never the caller's as received.
 */
const OWNED_BY_SIDECAR: ReadonlySet<string> = new Set([
  ...HOP_BY_HOP,
  'authorization',
  'x-timestamp',
  'x-nonce',
  'x-signature',
  'host',
  'content-length',
  'content-type',
  'content-encoding',
  'expect',
  'accept-encoding',
  'cookie',
  'forwarded',
  'x-real-ip',
  'via',
  'idempotency-key',
  'traceparent',
  'tracestate',
  'baggage',
]);

/** RFC 9110 5.1: a field name is a token. */
const TOKEN = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/;

function isOwnedBySidecar(name: string): boolean {
  return OWNED_BY_SIDECAR.has(name) || name.startsWith('x-forwarded-');
}

/**
 * Every client header forwarded, lowercase: the defaults and the names SIDECAR_FORWARD_REQUEST_HEADERS adds. Throws
 * a ConfigError naming the setting for a name that is not a header name or that the sidecar owns.
 */
export function forwardedRequestHeaders(extra: readonly string[]): readonly string[] {
  const setting = settingName('forwardRequestHeaders');
  const invalid = extra.filter((name) => !TOKEN.test(name));
  if (invalid.length > 0) {
    const quoted = invalid.map((name) => JSON.stringify(name)).join(', ');
    throw new ConfigError(setting, `${quoted}: not a header name (letters, digits and !#$%&'*+-.^_\`|~ only)`);
  }
  const names = extra.map((name) => name.toLowerCase());
  const owned = extra.filter((_, i) => isOwnedBySidecar(names[i] ?? ''));
  if (owned.length > 0) {
    throw new ConfigError(
      setting,
      `${owned.join(', ')}: set by the sidecar itself (credentials, signing, body framing, destination, ` +
        'hop-by-hop, cookies, forwarding, Idempotency-Key, trace context), never taken from a client',
    );
  }
  return [...new Set([...DEFAULT_FORWARDED_REQUEST_HEADERS, ...names])];
}
