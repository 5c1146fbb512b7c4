import { createPrivateKey } from 'node:crypto';
export const MIN_RSA_BITS = 2048;
/**
 * Parses a PEM RSA private key (PKCS#1 "RSA PRIVATE KEY" or PKCS#8 "PRIVATE KEY") into a KeyObject once,
 * so signing never re-parses PEM per request. Throws with a reason that never quotes the key.
 */
export function parsePrivateKey(pem) {
    if (!/-----BEGIN (RSA |ENCRYPTED )?PRIVATE KEY-----/.test(pem)) {
        throw new Error('not a PEM private key (expected a "PRIVATE KEY" or "RSA PRIVATE KEY" block)');
    }
    if (pem.includes('BEGIN ENCRYPTED PRIVATE KEY') || /Proc-Type:\s*4,ENCRYPTED/.test(pem)) {
        throw new Error('the private key is encrypted; provide an unencrypted PEM (protect it with file permissions)');
    }
    let key;
    try {
        key = createPrivateKey({ key: pem, format: 'pem' });
    }
    catch {
        throw new Error('not a readable PEM private key');
    }
    if (key.asymmetricKeyType !== 'rsa') {
        throw new Error(`key type is ${key.asymmetricKeyType ?? 'unknown'}; an RSA key is required`);
    }
    const bits = key.asymmetricKeyDetails?.modulusLength ?? 0;
    if (bits < MIN_RSA_BITS) {
        throw new Error(`key is ${bits} bits; at least ${MIN_RSA_BITS} are required`);
    }
    return key;
}
