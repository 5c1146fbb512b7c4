// Spec 2.2 and 5.2 use standard base64 with padding for `data` and `X-Signature`. A base64url string, a
// missing "=", or stray whitespace is a common vendor bug, and Buffer.from() would silently accept all of them,
// so the tools check the exact form instead of decoding leniently.

import { decodeStrictBase64 } from '../signing/verify.js';

/** True for non-empty standard base64 with padding, in its canonical form (unused bits zero). */
export function isStandardBase64(value: string): boolean {
  return decodeStrictBase64(value) !== undefined;
}

/** Why a string is not standard padded base64, in words that point at the likely vendor mistake. */
export function base64Problem(value: string): string | undefined {
  if (isStandardBase64(value)) return undefined;
  if (value === '') return 'is empty';
  if (/\s/.test(value)) return 'contains whitespace or line breaks';
  if (/[-_]/.test(value)) return 'uses "-" or "_": that is base64url, the spec requires standard base64 (+ and /)';
  if (/^[A-Za-z0-9+/]+$/.test(value) && value.length % 4 !== 0) return 'lacks "=" padding';
  return 'is not standard base64 with padding';
}
