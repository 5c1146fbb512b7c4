import { generateKeyPair } from 'node:crypto';
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { scratchDir } from './scratch.js';

const generate = promisify(generateKeyPair);

export interface TestKeys {
  readonly dir: string;
  readonly privateKeyPem: string;
  readonly publicKeyPem: string;
  readonly privateKeyFile: string;
  readonly publicKeyFile: string;
}

/** A fresh RSA key pair written to a scratch folder (PKCS#8 private key, SPKI public key). */
export async function makeKeys(bits = 2048, format: 'pkcs8' | 'pkcs1' = 'pkcs8'): Promise<TestKeys> {
  const dir = scratchDir('sidecar-keys-');
  const { privateKey, publicKey } = await generate('rsa', {
    modulusLength: bits,
    publicKeyEncoding: { type: 'spki', format: 'pem' },
    privateKeyEncoding: { type: format, format: 'pem' },
  });
  const privateKeyFile = join(dir, 'private-key.pem');
  const publicKeyFile = join(dir, 'public-key.pem');
  await writeFile(privateKeyFile, privateKey, { mode: 0o600 });
  await writeFile(publicKeyFile, publicKey);
  return { dir, privateKeyPem: privateKey, publicKeyPem: publicKey, privateKeyFile, publicKeyFile };
}
