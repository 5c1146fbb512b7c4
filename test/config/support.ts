// What the config tests share: the settings every production config needs, and a refusal as loadConfig reports it.
import assert from 'node:assert/strict';
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
