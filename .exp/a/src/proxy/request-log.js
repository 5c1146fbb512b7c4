import { createHash } from 'node:crypto';
import { signingString } from '../signing/signing-string.js';
export function sha256Hex(value) {
    return createHash('sha256').update(value).digest('hex');
}
/**
 * One line per request. The payload appears only as its length and SHA-256: enough to match it against the
 * internal service's own log, never enough to read it.
 */
export function logRequest(log, entry) {
    const level = entry.status >= 500 ? 'error' : entry.status >= 400 ? 'warn' : 'info';
    log[level]({ event: 'request', ...entry }, 'request answered');
}
/**
 * signature.verify.failed is the most common integration failure. The signing string is logged with `data`
 * replaced by its SHA-256, so an operator can diff it against the gateway's expectation without the payload.
 */
export function logVerifyFailure(log, requestId, result, data) {
    const redacted = signingString({ method: 'POST', ...result.signed, data: `sha256:${sha256Hex(data)}` });
    log.warn({ event: 'signature.verify.failed', requestId, signingString: redacted, fullUrl: result.signed.fullUrl }, 'gateway could not verify the signature; compare this signing string with the one the gateway expects');
}
