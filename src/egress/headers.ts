import type { IncomingHttpHeaders } from 'node:http';
import { HOP_BY_HOP } from '../config/forwarded-headers.js';

// The answer passes back unchanged but for framing: the sidecar computes its own Content-Length, and only it may say
// that an answer was replayed (docs/idempotency.md).
const DROP_RESPONSE = new Set([...HOP_BY_HOP, 'content-length', 'idempotent-replayed']);

const NO_NAMED_HEADERS: ReadonlySet<string> = new Set();

/** Headers named in Connection are hop-by-hop too (RFC 9110 7.6.1). */
function connectionNamed(connection: string | string[] | undefined): ReadonlySet<string> {
  // The usual values name no other header; skipping the split keeps the hot path free of garbage.
  if (connection === undefined || connection === 'keep-alive' || connection === 'close') return NO_NAMED_HEADERS;
  const value = Array.isArray(connection) ? connection.join(',') : connection;
  return new Set(
    value
      .split(',')
      .map((h) => h.trim().toLowerCase())
      .filter((h) => h !== ''),
  );
}

/**
 * The client headers that travel to the gateway: those `allowed` names (Config.forwardedRequestHeaders, e.g.
 * Accept, User-Agent, X-Request-Id), unless the client's Connection made them hop-by-hop.
 */
export function forwardableRequestHeaders(
  headers: IncomingHttpHeaders,
  allowed: ReadonlySet<string>,
): Record<string, string> {
  const extra = connectionNamed(headers.connection);
  const out: Record<string, string> = {};
  // Own keys only: nothing inherited (a polluted prototype) is ever forwarded.
  for (const name of Object.keys(headers)) {
    const value = headers[name];
    if (value === undefined || !allowed.has(name) || extra.has(name)) continue;
    out[name] = Array.isArray(value) ? value.join(', ') : value;
  }
  return out;
}

/** The caller's W3C trace context headers (traceparent, tracestate) as it sent them. */
export function callerTraceContext(headers: IncomingHttpHeaders): Record<string, string> {
  const out: Record<string, string> = {};
  for (const name of ['traceparent', 'tracestate'] as const) {
    const value = headers[name];
    if (value !== undefined) out[name] = Array.isArray(value) ? value.join(',') : value;
  }
  return out;
}

/** Gateway headers handed back to the client unchanged, minus hop-by-hop ones. */
export function forwardableResponseHeaders(
  headers: Record<string, string | string[]>,
): Record<string, string | string[]> {
  const extra = connectionNamed(headers.connection);
  const out: Record<string, string | string[]> = {};
  for (const name of Object.keys(headers)) {
    if (DROP_RESPONSE.has(name) || extra.has(name)) continue;
    out[name] = headers[name] as string | string[];
  }
  return out;
}
