// A sidecar carries in memory only the packages its configuration uses: the Redis client with the Redis store, the
// YAML parser with a YAML config file. Each start runs in a child process, so that no other test's imports count.
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { writeFile } from 'node:fs/promises';
import { createServer } from 'node:net';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { describe, test } from 'node:test';
import { makeKeys } from '../support/keys.js';
import { sidecarEnv } from '../support/sidecar.js';

const FIXTURE = join(import.meta.dirname, '../support/packages-at-start.ts');

/** A loopback port that nothing listens on: the gateway and Redis are unreachable, which start tolerates. */
async function closedPort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const address = server.address();
  await new Promise((resolve) => server.close(resolve));
  assert.ok(address !== null && typeof address === 'object');
  return address.port;
}

async function packagesAtStart(extra: NodeJS.ProcessEnv): Promise<string[]> {
  const keys = await makeKeys();
  const env = await sidecarEnv(keys, `http://127.0.0.1:${await closedPort()}`, extra);
  const { stdout } = await promisify(execFile)(process.execPath, ['--import', 'tsx', FIXTURE], {
    env: { PATH: process.env.PATH, ...env },
    timeout: 30_000,
  });
  return JSON.parse(stdout.trim().split('\n').at(-1) ?? '[]') as string[];
}

describe('optional packages are loaded only when the configuration uses them', () => {
  test('memory store, settings from the environment: neither the Redis client nor the YAML parser', async () => {
    assert.deepEqual(await packagesAtStart({}), []);
  });

  test('a YAML config file loads the YAML parser', async () => {
    const keys = await makeKeys();
    const file = join(keys.dir, 'sidecar.yaml');
    await writeFile(file, 'logLevel: info\n');
    assert.deepEqual(await packagesAtStart({ SIDECAR_CONFIG_FILE: file }), ['yaml']);
  });

  test('the Redis store loads the Redis client', async () => {
    const url = `redis://127.0.0.1:${await closedPort()}`;
    assert.deepEqual(await packagesAtStart({ SIDECAR_STATE_STORE: 'redis', SIDECAR_REDIS_URL: url }), [
      '@redis/client',
    ]);
  });
});
