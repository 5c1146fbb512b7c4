// The simulator's independent signature verifier: its own signing string and RSA PKCS#1 v1.5 / SHA-256 check.
import { createHash, verify } from 'node:crypto';
import type { KeyObject } from 'node:crypto';
import { constants } from 'node:crypto';

/** `<METHOD>.<FULL_URL>.<X-Timestamp>.<X-Nonce>.<body.data>`, five parts joined by literal dots (spec 5.2). */
export function buildSigningString(parts: {
  method: string;
  fullUrl: string;
  timestamp: string;
  nonce: string;
  data: string;
}): string {
  return [parts.method.toUpperCase(), parts.fullUrl, parts.timestamp, parts.nonce, parts.data].join('.');
}

/**
 * Verifies off the event loop (the callback form runs in libuv's thread pool), so a burst of signed requests
 * does not stall the simulator's other connections.
 */
export function verifySignature(publicKey: KeyObject, signingString: string, signature: Buffer): Promise<boolean> {
  return new Promise((resolve) => {
    verify(
      'sha256',
      Buffer.from(signingString, 'utf8'),
      { key: publicKey, padding: constants.RSA_PKCS1_PADDING },
      signature,
      (err, ok) => resolve(err === null && ok),
    );
  });
}

/** A fingerprint of the signing string for logs: lets a vendor compare with their own without logging data. */
export function signingStringDigest(signingString: string): string {
  return createHash('sha256').update(signingString, 'utf8').digest('hex');
}
