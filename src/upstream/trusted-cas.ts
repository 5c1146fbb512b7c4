import { rootCertificates } from 'node:tls';

/**
 * The CAs trusted for the gateway: the system roots plus SIDECAR_UPSTREAM_CA_FILE. Node's `ca` option replaces
 * the system roots, so the extra bundle is added to them; undefined keeps Node's defaults. The gateway client and
 * `check` both use this, so `check` proves exactly the trust `serve` will have.
 */
export function trustedCas(extraCa: string | undefined): string[] | undefined {
  return extraCa === undefined ? undefined : [...rootCertificates, extraCa];
}
