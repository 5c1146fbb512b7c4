import { rootCertificates } from 'node:tls';
/**
 * The CA list `check` trusts: the system roots plus SIDECAR_UPSTREAM_CA_FILE, the same "added to" rule the
 * setting documents, so a private CA works without silently dropping the public roots.
 */
export function trustedCas(extraCa) {
    return extraCa === undefined ? undefined : [...rootCertificates, extraCa];
}
/** Host and port to dial for a canonical origin (brackets of an IPv6 literal removed, default ports filled). */
export function dialTarget(origin) {
    const url = new URL(origin);
    const port = url.port === '' ? (url.protocol === 'https:' ? 443 : 80) : Number(url.port);
    return { host: url.hostname.replace(/^\[|\]$/g, ''), port };
}
