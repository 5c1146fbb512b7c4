/**
 * The CAs trusted for a TLS connection the sidecar makes (the gateway, the forward proxy, Redis): the system roots
 * plus a CA file's bundle. Node's `ca` option replaces the system roots, so the extra bundle is added to them;
 * undefined keeps Node's defaults. `serve`, `check` and the Redis client all use this, so `check` proves exactly the
 * trust `serve` will have.
 *
 * node:tls is taken from the running process rather than imported: an ES module import of a built-in reads all of
 * its exports, and node:tls's `rootCertificates` getter then makes and keeps Node's 140-odd bundled roots as strings,
 * some 0.2 MB for the life of the process, with a CA file set or not (docs/performance.md, "Root certificates only
 * with a CA file").
 */
export function trustedCas(extraCa: string | undefined): string[] | undefined {
  if (extraCa === undefined) return undefined;
  const { rootCertificates } = process.getBuiltinModule('node:tls');
  return [...rootCertificates, extraCa];
}
