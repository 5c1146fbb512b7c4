import { GATEWAY_ERROR_CODES } from '../observability/metric-names.js';
/** The gateway's own `code` field, if its body is a JSON object that has one. */
export function gatewayCode(response) {
    if (response.body.length === 0 || response.body.length > 64 * 1024)
        return undefined;
    try {
        const value = JSON.parse(response.body.toString('utf8'));
        if (typeof value !== 'object' || value === null)
            return undefined;
        const code = value.code;
        return typeof code === 'string' ? code : undefined;
    }
    catch {
        return undefined;
    }
}
/** Spec 5.1: HTTP 401 with body code FAILED means the token was refused before anything was done. */
export function isTokenRejection(response, code) {
    return response.status === 401 && code === 'FAILED';
}
const KNOWN = new Set(GATEWAY_ERROR_CODES);
/** Metric label for a gateway error answer, bounded to the contract's set; undefined for a success. */
export function errorLabel(status, code) {
    if (status < 400)
        return undefined;
    if (status === 403)
        return 'ip.forbidden';
    return code !== undefined && KNOWN.has(code) ? code : 'other';
}
