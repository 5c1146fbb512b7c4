import { createPublicKey, type KeyObject } from 'node:crypto';
import { MIN_RSA_BITS, notRsaKey } from './private-key.js';

const PEM_BLOCK = /-----BEGIN ([A-Z ]+)-----[\s\S]*?-----END \1-----/g;
const PUBLIC_LABELS = new Set(['PUBLIC KEY', 'RSA PUBLIC KEY', 'CERTIFICATE']);

/**
 * Every RSA public key of a PEM file, in file order. A file holds several keys so that a rotation of the gateway's
 * postback key never drops a postback: old and new are both accepted until the old one is removed. Each key is an
 * RSA key of at least 2048 bits (spec 5.2 and 8). Reasons never quote the file.
 */
export function parsePublicKeys(pem: string): KeyObject[] {
  if (/-----BEGIN [A-Z ]*PRIVATE KEY-----/.test(pem)) {
    throw new Error('holds a private key; give the public key(s) only');
  }
  const blocks = [...pem.matchAll(PEM_BLOCK)].filter(([, label = '']) => PUBLIC_LABELS.has(label));
  if (blocks.length === 0) throw new Error('holds no PEM public key ("PUBLIC KEY", "RSA PUBLIC KEY" or "CERTIFICATE")');
  return blocks.map(([block], index) => {
    const which = blocks.length > 1 ? `key ${index + 1} of ${blocks.length}: ` : '';
    let key: KeyObject;
    try {
      key = createPublicKey({ key: block, format: 'pem' });
    } catch {
      throw new Error(`${which}not a readable PEM public key or certificate`);
    }
    if (key.asymmetricKeyType !== 'rsa') throw new Error(`${which}${notRsaKey(key.asymmetricKeyType)}`);
    const bits = key.asymmetricKeyDetails?.modulusLength ?? 0;
    if (bits < MIN_RSA_BITS) throw new Error(`${which}key is ${bits} bits; at least ${MIN_RSA_BITS} are required`);
    return key;
  });
}
