import { hash } from 'node:crypto';
import { sidecarErrors } from '../errors.js';

/** The caller's header (the IETF draft "The Idempotency-Key HTTP Header Field"; Stripe's name). */
export const IDEMPOTENCY_KEY_HEADER = 'idempotency-key';

// 1 to 255 visible ASCII characters (VCHAR, RFC 5234): no spaces, no control characters, nothing that a log line
// or a store key could misread.
const VALID_KEY = /^[\x21-\x7e]{1,255}$/;

/**
 * A caller's key, known from here on only by its SHA-256: the key itself may be guessable or carry meaning (an
 * order number), so it is never stored, logged or echoed. The digest names the store record and the log line.
 */
export interface IdempotencyKey {
  readonly sha256: string;
}

/**
 * The request's key, or undefined when it carries none; throws key_invalid for a malformed one. Node joins
 * repeated Idempotency-Key headers with ", ", which the space makes invalid: one request, one key.
 */
export function idempotencyKey(header: string | string[] | undefined): IdempotencyKey | undefined {
  if (header === undefined) return undefined;
  if (typeof header !== 'string' || !VALID_KEY.test(header)) throw sidecarErrors.idempotencyKeyInvalid();
  return { sha256: hash('sha256', header, 'hex') };
}
