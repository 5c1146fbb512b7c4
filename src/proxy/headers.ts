import type { IncomingHttpHeaders } from 'node:http';

// RFC 9110 7.6.1 hop-by-hop headers, plus those whose value the sidecar computes itself.
const HOP_BY_HOP = [
  'connection',
  'keep-alive',
  'proxy-connection',
  'proxy-authenticate',
  'proxy-authorization',
  'te',
  'trailer',
  'transfer-encoding',
  'upgrade',
];

// Never taken from a client: the sidecar alone authenticates and signs, and the destination is fixed.
const OWNED_BY_SIDECAR = [
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
];

// Internal context that has no business at a third party: session cookies and the cluster's addresses.
const INTERNAL_ONLY = [
  'cookie',
  'forwarded',
  'x-forwarded-for',
  'x-forwarded-host',
  'x-forwarded-proto',
  'x-forwarded-port',
  'x-real-ip',
  'via',
];

// The sidecar's own idempotency protocol (docs/idempotency.md): the key is the caller's secret-ish handle, never
// the gateway's business, and only the sidecar may say that an answer was replayed.
const IDEMPOTENCY = ['idempotency-key'];

// W3C trace context (docs/operations.md#tracing): the caller's trace is internal. With
// SIDECAR_TRACE_PROPAGATE_UPSTREAM the sidecar sends its own attempt's traceparent instead, never the caller's.
const TRACE_CONTEXT = ['traceparent', 'tracestate', 'baggage'];

const DROP_REQUEST = new Set([...HOP_BY_HOP, ...OWNED_BY_SIDECAR, ...INTERNAL_ONLY, ...IDEMPOTENCY, ...TRACE_CONTEXT]);
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

/** Client headers that may travel to the gateway (e.g. Accept, User-Agent, X-Request-Id). */
export function forwardableRequestHeaders(headers: IncomingHttpHeaders): Record<string, string> {
  const extra = connectionNamed(headers.connection);
  const out: Record<string, string> = {};
  // Own keys only: nothing inherited (a polluted prototype) is ever forwarded.
  for (const name of Object.keys(headers)) {
    const value = headers[name];
    if (value === undefined || DROP_REQUEST.has(name) || extra.has(name)) continue;
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
