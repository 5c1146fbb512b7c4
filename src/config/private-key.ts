import { createPrivateKey, type KeyObject } from 'node:crypto';

export const MIN_RSA_BITS = 2048;

const KEY_TYPE_NAMES: Readonly<Record<string, string>> = {
  ec: 'an EC key',
  ed25519: 'an Ed25519 key',
  ed448: 'an Ed448 key',
  dsa: 'a DSA key',
  'rsa-pss': 'an RSA-PSS key (restricted to PSS signatures)',
  x25519: 'an X25519 key',
  x448: 'an X448 key',
  dh: 'a Diffie-Hellman key',
};

/** "an EC key: RSA required (...)": names the key type, so the user looks for the right key, not a file problem. */
export function notRsaKey(type: string | undefined): string {
  const name = KEY_TYPE_NAMES[type ?? ''] ?? `a key of type ${type ?? 'unknown'}`;
  return `${name}: RSA required (spec 5.2: RSA, PKCS#1 v1.5, SHA-256)`;
}

/**
 * Parses a PEM RSA private key (PKCS#1 "RSA PRIVATE KEY" or PKCS#8 "PRIVATE KEY") into a KeyObject once,
 * so signing never re-parses PEM per request. Throws with a reason that never quotes the key.
 */
export function parsePrivateKey(pem: string): KeyObject {
  // OpenSSL's own EC and DSA blocks, and OpenSSH's format, are keys of the wrong kind, not unreadable files.
  const label = /-----BEGIN (EC|DSA|OPENSSH) PRIVATE KEY-----/.exec(pem)?.[1];
  if (label === 'EC' || label === 'DSA') throw new Error(notRsaKey(label.toLowerCase()));
  if (label === 'OPENSSH') {
    throw new Error(
      'an OpenSSH-format key: a PEM RSA key is required ("PRIVATE KEY" or "RSA PRIVATE KEY"; keygen makes one)',
    );
  }
  if (!/-----BEGIN (RSA |ENCRYPTED )?PRIVATE KEY-----/.test(pem)) {
    throw new Error('not a PEM private key (expected a "PRIVATE KEY" or "RSA PRIVATE KEY" block)');
  }
  if (pem.includes('BEGIN ENCRYPTED PRIVATE KEY') || /Proc-Type:\s*4,ENCRYPTED/.test(pem)) {
    throw new Error('the private key is encrypted; provide an unencrypted PEM (protect it with file permissions)');
  }
  let key: KeyObject;
  try {
    key = createPrivateKey({ key: pem, format: 'pem' });
  } catch {
    throw new Error('not a readable PEM private key');
  }
  if (key.asymmetricKeyType !== 'rsa') throw new Error(notRsaKey(key.asymmetricKeyType));
  const bits = key.asymmetricKeyDetails?.modulusLength ?? 0;
  if (bits < MIN_RSA_BITS) {
    throw new Error(`key is ${bits} bits; at least ${MIN_RSA_BITS} are required`);
  }
  return key;
}
