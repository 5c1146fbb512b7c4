import { NONCE_PATTERN } from '../signing/nonce.js';
import { base64Problem } from './base64.js';

const TIMESTAMP_PATTERN = /^\d+$/;

/**
 * Why --method is unusable, or undefined. The spec only signs POST, but postbacks or tests may use others.
 * Spec 5.2 signs the method in uppercase: a lowercase one is refused, not fixed, so that a vendor comparing
 * with their own signer sees the mistake instead of a signature their code would never produce.
 */
export function methodProblem(method: string): string | undefined {
  if (/^[A-Z]+$/.test(method)) return undefined;
  if (/^[A-Za-z]+$/.test(method)) {
    return `--method "${method}" must be uppercase ("${method.toUpperCase()}"): spec 5.2 signs the method in uppercase`;
  }
  return `--method "${method}" is not an HTTP method`;
}

/**
 * Why a --payload text is not a body the sidecar would sign, or undefined: like the sidecar, it must be JSON
 * (no byte order mark) and a JSON object.
 */
export function payloadProblem(text: string): string | undefined {
  if (text.startsWith('\uFEFF'))
    return 'starts with a byte order mark (U+FEFF), which is not JSON (sidecar.body.invalid_json)';
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (err) {
    return `is not valid JSON: ${(err as Error).message} (sidecar.body.invalid_json)`;
  }
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    return 'is JSON but not an object (sidecar.body.not_object)';
  }
  return undefined;
}

/** Why an X-Timestamp value breaks spec 5.2 (Unix seconds, decimal ASCII), or undefined. */
export function timestampProblem(value: string): string | undefined {
  if (!TIMESTAMP_PATTERN.test(value)) return `"${value}" is not Unix seconds in decimal ASCII`;
  // 13 digits would be milliseconds, which the spec rules out explicitly.
  if (value.length >= 13) return `"${value}" looks like milliseconds; X-Timestamp is in seconds`;
  if (value.length > 1 && value.startsWith('0')) return `"${value}" has a leading zero`;
  return undefined;
}

/** Why an X-Nonce value breaks spec 5.2 (16 to 64 of [A-Za-z0-9_-]), or undefined. */
export function nonceProblem(value: string): string | undefined {
  if (NONCE_PATTERN.test(value)) return undefined;
  if (value.length < 16 || value.length > 64) return `is ${value.length} characters; 16 to 64 are required`;
  return 'has characters outside [A-Za-z0-9_-] (standard base64 "+", "/", "=" are not allowed)';
}

/** Why a body `data` value breaks spec 2.2, or undefined. */
export function dataProblem(value: string): string | undefined {
  const problem = base64Problem(value);
  return problem === undefined ? undefined : `data ${problem}`;
}
