import { createHash } from 'node:crypto';

/**
 * What makes two requests "the same request" for one key: SHA-256 over the route, the query and the exact body
 * bytes. A NUL separates the parts (a request target cannot contain one), so ("/a", "b=1") and ("/ab", "=1")
 * never collide. Headers are left out: a retry may well carry another X-Request-Id or User-Agent.
 */
export function requestFingerprint(route: string, query: string, body: Buffer): string {
  return createHash('sha256').update(route).update('\0').update(query).update('\0').update(body).digest('hex');
}
