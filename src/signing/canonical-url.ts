import type { BaseAddress } from '../config/base-url.js';

/** What the sidecar posts: the path below the origin and the query exactly as the client sent it. */
export interface RequestTarget {
  /** Path as posted, starting with "/", never normalised (a trailing "/" is kept). */
  readonly path: string;
  /** Query without "?", byte for byte; "" when absent or empty. */
  readonly query: string;
}

/**
 * Splits a request target ("/p?q#f") into path and query. The fragment is dropped: it is never sent
 * and never signed (spec 5.2). An empty query ("/p?") becomes "" so that neither "?" is sent nor signed.
 */
export function splitRequestTarget(target: string): RequestTarget {
  const withoutFragment = target.split('#', 1)[0] ?? '';
  const q = withoutFragment.indexOf('?');
  if (q === -1) return { path: withoutFragment, query: '' };
  return { path: withoutFragment.slice(0, q), query: withoutFragment.slice(q + 1) };
}

/** Path and query as they go on the request line: base path prefix + posted path, "?query" only if non-empty. */
export function upstreamPath(base: BaseAddress, target: RequestTarget): string {
  const query = target.query === '' ? '' : `?${target.query}`;
  return `${base.pathPrefix}${target.path}${query}`;
}

/**
 * The FULL_URL part of the signing string. The origin was canonicalised once when the base address was
 * parsed (lowercase scheme and host, default port omitted), and the path comes from upstreamPath(), the same
 * function that builds the request line: the signed URL and the posted URL cannot differ.
 */
export function signedUrl(base: BaseAddress, target: RequestTarget): string {
  return `${base.origin}${upstreamPath(base, target)}`;
}
