import { verify, type KeyObject } from 'node:crypto';

/**
 * True when `signature` is an RSA PKCS#1 v1.5 SHA-256 signature (spec 5.2) of `text` (UTF-8) by one of `keys`.
 * Several keys: a key rotation (old and new in one file) never refuses a genuine signature. Synchronous: one
 * 2048-bit verification costs tens of microseconds, far less than a trip to the thread pool.
 */
export function verifiesWithAny(keys: readonly KeyObject[], text: string, signature: Buffer): boolean {
  const bytes = Buffer.from(text, 'utf8');
  // An `rsa` key verifies PKCS#1 v1.5 by default; an options object around it would cost a caught TypeError per
  // call (signer.ts). Any other kind of key is no key of the gateway's.
  return keys.some((key) => key.asymmetricKeyType === 'rsa' && verify('sha256', bytes, key, signature));
}

const STANDARD_PADDED = /^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$/;

/**
 * Strict standard base64 with padding (RFC 4648 section 4), or undefined. Buffer.from(x, 'base64') silently
 * accepts base64url, missing padding and stray characters; the round trip also refuses non-zero padding bits, so
 * two strings never decode to one value. Empty input is refused.
 */
export function decodeStrictBase64(value: string): Buffer | undefined {
  if (value === '' || !STANDARD_PADDED.test(value)) return undefined;
  const bytes = Buffer.from(value, 'base64');
  return bytes.toString('base64') === value ? bytes : undefined;
}
