import { randomBytes } from 'node:crypto';
const NONCE_BYTES = 16;
const POOL_NONCES = 256;
// randomBytes has a fixed per-call cost; drawing 256 nonces' worth at once keeps it off the hot path.
// Each nonce still gets 16 fresh bytes that are never reused.
let pool = Buffer.alloc(0);
let offset = 0;
/** X-Nonce: 16 random bytes, base64url without padding (22 characters of [A-Za-z0-9_-]). */
export function newNonce() {
    if (offset + NONCE_BYTES > pool.length) {
        pool = randomBytes(NONCE_BYTES * POOL_NONCES);
        offset = 0;
    }
    const nonce = pool.toString('base64url', offset, offset + NONCE_BYTES);
    offset += NONCE_BYTES;
    return nonce;
}
/** The spec's format rule, used by tests and the verify tool. */
export const NONCE_PATTERN = /^[A-Za-z0-9_-]{16,64}$/;
