// A sidecar carries in memory only the packages its configuration uses: the Redis client with the Redis store, the
// YAML parser with a YAML config file, the OpenTelemetry SDK and exporter with tracing on. Each start runs in a child
// process, so that no other test's imports count.
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

interface Loaded {
  /** Which of OPTIONAL_PACKAGES were loaded. */
  readonly packages: string[];
  /** Every @opentelemetry/* package loaded. */
  readonly otel: string[];
}

async function loadedAtStart(extra: NodeJS.ProcessEnv): Promise<Loaded> {
  const keys = await makeKeys();
  const env = await sidecarEnv(keys, `http://127.0.0.1:${await closedPort()}`, extra);
  const { stdout } = await promisify(execFile)(process.execPath, ['--import', 'tsx', FIXTURE], {
    env: { PATH: process.env.PATH, ...env },
    timeout: 30_000,
  });
  return JSON.parse(stdout.trim().split('\n').at(-1) ?? '{}') as Loaded;
}

async function packagesAtStart(extra: NodeJS.ProcessEnv): Promise<string[]> {
  return (await loadedAtStart(extra)).packages;
}

/** The SDK and what only it brings: none may be in memory when tracing is off. */
const isSdk = (name: string) => name !== '@opentelemetry/api' && name !== '@opentelemetry/semantic-conventions';

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

describe('OpenTelemetry is loaded only when tracing is on', () => {
  test('off (no OTLP endpoint): no SDK, exporter, core or resources module; the API only as prom-client brings it', async () => {
    const { otel } = await loadedAtStart({});
    assert.deepEqual(otel.filter(isSdk), []);
    assert.deepEqual(otel, ['@opentelemetry/api']);
  });

  test('an endpoint with OTEL_SDK_DISABLED=true is off too', async () => {
    const endpoint = `http://127.0.0.1:${await closedPort()}`;
    const { otel } = await loadedAtStart({ OTEL_EXPORTER_OTLP_ENDPOINT: endpoint, OTEL_SDK_DISABLED: 'true' });
    assert.deepEqual(otel.filter(isSdk), []);
  });

  test('on (OTEL_EXPORTER_OTLP_TRACES_ENDPOINT): the SDK and the OTLP/HTTP exporter are loaded', async () => {
    const endpoint = `http://127.0.0.1:${await closedPort()}/v1/traces`;
    const { otel } = await loadedAtStart({ OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: endpoint });
    for (const name of ['sdk-trace-base', 'exporter-trace-otlp-http', 'core', 'resources']) {
      assert.ok(otel.includes(`@opentelemetry/${name}`), `${name} in ${otel.join(', ')}`);
    }
  });
});
