// What the config tests share: the settings every production config needs, secret files beside the key, and a
// refusal as loadConfig reports it.
import assert from 'node:assert/strict';
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { ConfigError } from '../../src/errors.js';

/** The settings a production config cannot start without; each test adds (or removes) the ones it is about. */
export const productionEnv = (privateKeyFile: string): NodeJS.ProcessEnv => ({
  SIDECAR_BASE_URL: 'https://gateway.example.com',
  SIDECAR_ENVIRONMENT: 'production',
  SIDECAR_USERNAME: 'vendor@example.com',
  SIDECAR_PASSWORD: 'pw',
  SIDECAR_PRIVATE_KEY_FILE: privateKeyFile,
});

/**
 * Asserts that `load` throws a ConfigError whose message starts with `setting` (and matches `reason` when given);
 * returns that message for the caller's own checks.
 */
export function refusal(load: () => unknown, setting: string, reason?: RegExp): string {
  let message = '';
  assert.throws(load, (err: unknown) => {
    assert.ok(err instanceof ConfigError);
    assert.ok(err.message.startsWith(setting), `"${err.message}" names ${setting}`);
    if (reason !== undefined) assert.match(err.message, reason);
    message = err.message;
    return true;
  });
  return message;
}

/**
 * A password file (mode 0600, with a trailing newline as editors leave it) and a CA file (a PEM shape, enough for
 * the settings' checks) named after `name`, in `dir`.
 */
export async function secretFiles(
  dir: string,
  name: string,
  password: string,
): Promise<{ passwordFile: string; caFile: string }> {
  const passwordFile = join(dir, `${name}-password`);
  await writeFile(passwordFile, `${password}\n`, { mode: 0o600 });
  const caFile = join(dir, `${name}-ca.pem`);
  await writeFile(caFile, '-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n');
  return { passwordFile, caFile };
}
