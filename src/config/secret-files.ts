// The checks a secret file's content passes, at start (load.ts) and at every reload (secret-watch.ts): one
// function per file, so a rotated file is judged exactly as the one the sidecar started with. Reasons never
// quote the content.
import { createHash, createSecretKey, type KeyObject } from 'node:crypto';
import { ConfigError } from '../errors.js';
import { parsePrivateKey } from './private-key.js';
import { Secret } from './secret.js';

/** How every group reads a file a setting names: one reader (load.ts), so a refusal names the setting. */
export type ReadSettingFile = (setting: string, path: string) => string;

/** A secret file read at start, with its content digest: the rotation watcher's starting point. */
export interface LoadedFile {
  readonly file: string;
  readonly digest: string;
}

/** What a group's parser answers: its config (undefined when refused), every refusal at once, the files it read. */
export interface GroupResult<Config> {
  readonly config: Config | undefined;
  readonly errors: readonly ConfigError[];
  readonly loaded: readonly LoadedFile[];
}

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

/** The shortest MAC key SIDECAR_STATE_MAC_KEY_FILE takes: HMAC-SHA256's own output size. */
export const MIN_MAC_KEY_BYTES = 32;

/**
 * SIDECAR_STATE_MAC_KEY_FILE: one key a line, base64 (or base64url) of at least 32 random bytes, newest first (the
 * first signs, every one verifies). Blank lines are skipped; reasons name a key by its line, never its text.
 */
export function macKeysFromFile(setting: string, file: string, text: string): KeyObject[] {
  const lines = text
    .split(/\r?\n/)
    .map((line) => line.trim())
    .filter((line) => line !== '');
  if (lines.length === 0) throw new ConfigError(setting, `file ${file} is empty`);
  return lines.map((line, index) => {
    const which = lines.length > 1 ? `key ${index + 1} of ${lines.length}: ` : '';
    if (!/^[A-Za-z0-9+/_-]+={0,2}$/.test(line)) {
      throw new ConfigError(setting, `${file}: ${which}not base64 (one key a line: openssl rand -base64 32)`);
    }
    const bytes = Buffer.from(line, 'base64');
    if (bytes.length < MIN_MAC_KEY_BYTES) {
      throw new ConfigError(
        setting,
        `${file}: ${which}${bytes.length} bytes; at least ${MIN_MAC_KEY_BYTES} random bytes`,
      );
    }
    return createSecretKey(bytes);
  });
}

/** What identifies a secret file's content, at start and at every reload, without keeping the content. */
export function contentDigest(text: string): string {
  return createHash('sha256').update(text, 'utf8').digest('hex');
}
