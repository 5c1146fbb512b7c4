import { createPublicKey, type KeyObject } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import { MIN_RSA_BITS, notRsaKey, parsePrivateKey } from '../config/private-key.js';
import { publicKeyFingerprint } from '../signing/keys.js';

export interface LoadedKey {
  readonly key: KeyObject;
  readonly bits: number;
  readonly fingerprint: string;
}

async function readText(path: string): Promise<string> {
  try {
    return await readFile(path, 'utf8');
  } catch (err) {
    // Only the errno code: never echo file contents, which for a private key would be the secret itself.
    throw new Error(`cannot read ${path}: ${(err as NodeJS.ErrnoException).code ?? 'error'}`);
  }
}

function describe(key: KeyObject): LoadedKey {
  return { key, bits: key.asymmetricKeyDetails?.modulusLength ?? 0, fingerprint: publicKeyFingerprint(key) };
}

/** Reads a private key with the same rules as `serve` (RSA, unencrypted, >= 2048 bits). */
export async function loadPrivateKeyFile(path: string): Promise<LoadedKey> {
  const pem = await readText(path);
  try {
    return describe(parsePrivateKey(pem));
  } catch (err) {
    throw new Error(`${path}: ${(err as Error).message}`);
  }
}

/**
 * Reads a public key: a "PUBLIC KEY" or "RSA PUBLIC KEY" block, or a certificate. Small keys are accepted
 * with a note by the caller: verify must still explain a signature made with a key the gateway would refuse.
 */
export async function loadPublicKeyFile(path: string): Promise<LoadedKey> {
  const pem = await readText(path);
  if (/-----BEGIN [A-Z ]*PRIVATE KEY-----/.test(pem)) {
    throw new Error(`${path} holds a private key; pass the public key (keygen writes it beside the private one)`);
  }
  let key: KeyObject;
  try {
    key = createPublicKey({ key: pem, format: 'pem' });
  } catch {
    throw new Error(`${path}: not a readable PEM public key or certificate`);
  }
  if (key.asymmetricKeyType !== 'rsa') throw new Error(`${path}: ${notRsaKey(key.asymmetricKeyType)}`);
  return describe(key);
}

export { MIN_RSA_BITS };
