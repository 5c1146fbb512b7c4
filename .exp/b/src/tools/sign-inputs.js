import { NONCE_PATTERN } from '../signing/nonce.js';
import { base64Problem } from './base64.js';
const TIMESTAMP_PATTERN = /^\d+$/;
/** Why --method is unusable, or undefined. The spec only signs POST, but postbacks or tests may use others. */
export function methodProblem(method) {
    return /^[A-Za-z]+$/.test(method) ? undefined : `--method "${method}" is not an HTTP method`;
}
/** Why an X-Timestamp value breaks spec 5.2 (Unix seconds, decimal ASCII), or undefined. */
export function timestampProblem(value) {
    if (!TIMESTAMP_PATTERN.test(value))
        return `"${value}" is not Unix seconds in decimal ASCII`;
    // 13 digits would be milliseconds, which the spec rules out explicitly.
    if (value.length >= 13)
        return `"${value}" looks like milliseconds; X-Timestamp is in seconds`;
    if (value.length > 1 && value.startsWith('0'))
        return `"${value}" has a leading zero`;
    return undefined;
}
/** Why an X-Nonce value breaks spec 5.2 (16 to 64 of [A-Za-z0-9_-]), or undefined. */
export function nonceProblem(value) {
    if (NONCE_PATTERN.test(value))
        return undefined;
    if (value.length < 16 || value.length > 64)
        return `is ${value.length} characters; 16 to 64 are required`;
    return 'has characters outside [A-Za-z0-9_-] (standard base64 "+", "/", "=" are not allowed)';
}
/** Why a body `data` value breaks spec 2.2, or undefined. */
export function dataProblem(value) {
    const problem = base64Problem(value);
    return problem === undefined ? undefined : `data ${problem}`;
}
