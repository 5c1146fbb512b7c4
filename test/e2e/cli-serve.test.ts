import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { describe, it } from 'node:test';
import { makeKeys } from '../support/keys.js';

const MAIN = new URL('../../src/main.ts', import.meta.url).pathname;

function serve(env: NodeJS.ProcessEnv) {
  // Only PATH is inherited: the sidecar must not pick up settings from the developer's own environment.
  return spawnSync(process.execPath, ['--import', 'tsx', MAIN, 'serve'], {
    env: { PATH: process.env.PATH, ...env },
    encoding: 'utf8',
    timeout: 20_000,
  });
}

describe('signing-sidecar serve refuses a bad configuration', () => {
  it('a missing setting: exit 2, one stderr line naming the env var, nothing on stdout', async () => {
    const keys = await makeKeys();
    const result = serve({
      SIDECAR_ENVIRONMENT: 'staging',
      SIDECAR_USERNAME: 'u@example.com',
      SIDECAR_PASSWORD: 'pw',
      SIDECAR_PRIVATE_KEY_FILE: keys.privateKeyFile,
    });
    assert.equal(result.status, 2);
    assert.equal(result.stdout, '');
    assert.equal(result.stderr, 'signing-sidecar: configuration error: SIDECAR_BASE_URL (baseUrl): is required\n');
  });

  it('a 1024-bit key: exit 2, and the key never appears in the output', async () => {
    const keys = await makeKeys(1024);
    const result = serve({
      SIDECAR_BASE_URL: 'https://gateway.example.com',
      SIDECAR_ENVIRONMENT: 'production',
      SIDECAR_USERNAME: 'u@example.com',
      SIDECAR_PASSWORD: 'hunter2-secret',
      SIDECAR_PRIVATE_KEY_FILE: keys.privateKeyFile,
    });
    assert.equal(result.status, 2);
    assert.match(
      result.stderr,
      /SIDECAR_PRIVATE_KEY_FILE \(privateKeyFile\): .* 1024 bits; at least 2048 are required\n$/,
    );
    assert.equal(result.stderr.split('\n').length, 2);
    assert.equal(`${result.stdout}${result.stderr}`.includes('hunter2-secret'), false);
    assert.equal(`${result.stdout}${result.stderr}`.includes('PRIVATE KEY'), false);
  });

  it('an unknown command exits 2 with the usage', () => {
    const result = spawnSync(process.execPath, ['--import', 'tsx', MAIN, 'serv'], { encoding: 'utf8' });
    assert.equal(result.status, 2);
    assert.match(result.stderr, /unknown command "serv"/);
  });
});
