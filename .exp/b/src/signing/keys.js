import { createHash, createPublicKey } from 'node:crypto';
/**
 * SHA-256 of the public key's DER SubjectPublicKeyInfo, lowercase hex. Reproducible with
 * `openssl pkey -in key.pem -pubout -outform DER | openssl dgst -sha256`; safe to log and label: it reveals
 * nothing about the private key.
 */
export function publicKeyFingerprint(key) {
    const publicKey = key.type === 'private' ? createPublicKey(key) : key;
    const der = publicKey.export({ type: 'spki', format: 'der' });
    return createHash('sha256').update(der).digest('hex');
}
/** The public half as the PEM "PUBLIC KEY" block that is sent to the account manager. */
export function publicKeyPem(key) {
    const publicKey = key.type === 'private' ? createPublicKey(key) : key;
    return publicKey.export({ type: 'spki', format: 'pem' }).toString();
}
