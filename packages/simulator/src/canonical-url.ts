// The simulator's own rebuild of FULL_URL (spec 5.2). Deliberately written apart from src/signing: the server
// derives the URL from its *configured public base address* and the request target *exactly as received*,
// never from anything the client claims (Host header, absolute-form target), so an environment mismatch shows.

export interface PublicBase {
  /** Lowercase scheme and host, default port omitted, e.g. "https://gateway.example.com:8443". */
  readonly origin: string;
  /** Path prefix the simulator is mounted under, without trailing slash ("" or e.g. "/gw"). */
  readonly pathPrefix: string;
}

export function parsePublicBase(raw: string): PublicBase {
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    throw new Error(`public base URL "${raw}" is not an absolute URL`);
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') {
    throw new Error(`public base URL "${raw}" must be http:// or https://`);
  }
  if (url.search !== '' || url.hash !== '' || raw.includes('?') || raw.includes('#')) {
    throw new Error(`public base URL "${raw}" must not carry a query or fragment`);
  }
  if (url.username !== '' || url.password !== '') throw new Error('public base URL must not carry credentials');
  // WHATWG URL lowercases scheme and host and drops the default port: exactly the spec's first three rules.
  return { origin: `${url.protocol}//${url.host}`, pathPrefix: url.pathname.replace(/\/+$/, '') };
}

/**
 * FULL_URL for a request target as received (origin-form, e.g. "/api/v2/transaction/init?x=1").
 * The path and a non-empty query are kept byte for byte; an empty query loses its "?"; fragments never arrive.
 */
export function signedUrlFor(base: PublicBase, requestTarget: string): string {
  const q = requestTarget.indexOf('?');
  if (q === -1) return base.origin + requestTarget;
  const path = requestTarget.slice(0, q);
  const query = requestTarget.slice(q + 1);
  return query === '' ? base.origin + path : `${base.origin}${path}?${query}`;
}
