// The checks a secret file's content passes, at start (load.ts) and at every reload (secret-watch.ts): one
// function per file, so a rotated file is judged exactly as the one the sidecar started with. Reasons never
// quote the content.
import { createHash, type KeyObject } from 'node:crypto';
import { ConfigError } from '../errors.js';
import { parsePrivateKey } from './private-key.js';
import { Secret } from './secret.js';

/** SIDECAR_PASSWORD_FILE: one trailing newline (editors, `echo`) is never part of the password; empty is refused. */
export function passwordFromFile(setting: string, file: string, text: string): Secret {
  const value = text.replace(/\r?\n$/, '');
  if (value === '') throw new ConfigError(setting, `file ${file} is empty`);
  return new Secret(value);
}

/** SIDECAR_PRIVATE_KEY_FILE: a PEM RSA key of at least 2048 bits (parsePrivateKey). */
export function privateKeyFromFile(setting: string, file: string, pem: string): KeyObject {
  try {
    return parsePrivateKey(pem);
  } catch (err) {
    throw new ConfigError(setting, `${file}: ${(err as Error).message}`);
  }
}

/** SIDECAR_UPSTREAM_CA_FILE: PEM text holding at least one certificate. */
export function caFromFile(setting: string, file: string, pem: string): string {
  if (!pem.includes('-----BEGIN CERTIFICATE-----')) throw new ConfigError(setting, `${file} holds no PEM certificate`);
  return pem;
}

/** What identifies a secret file's content, at start and at every reload, without keeping the content. */
export function contentDigest(text: string): string {
  return createHash('sha256').update(text, 'utf8').digest('hex');
}
