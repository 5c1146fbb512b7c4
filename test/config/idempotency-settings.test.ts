import assert from 'node:assert/strict';
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { before, describe, it } from 'node:test';
import { loadConfig } from '../../src/config/load.js';
import { makeKeys, type TestKeys } from '../support/keys.js';
import { productionEnv, refusal } from './support.js';

describe('config: idempotency settings', () => {
  let keys: TestKeys;
  let env: NodeJS.ProcessEnv;
  before(async () => {
    keys = await makeKeys();
    env = productionEnv(keys.privateKeyFile);
  });
  const refused = (overrides: NodeJS.ProcessEnv, setting: string) => {
    refusal(() => loadConfig({ ...env, ...overrides }), setting);
  };

  it('defaults: a key is optional and kept for a day; a claim outlives its last renewal by 5 s', () => {
    assert.deepEqual(loadConfig(env).idempotency, { required: false, ttlSeconds: 86_400, leaseMs: 5_000 });
  });

  it('SIDECAR_IDEMPOTENCY_LEASE_MS: on Redis at least twice the command timeout, so a renewal lands within it', () => {
    const redis = { SIDECAR_STATE_STORE: 'redis', SIDECAR_REDIS_URL: 'redis://127.0.0.1:6379' };
    const lease = 'SIDECAR_IDEMPOTENCY_LEASE_MS (idempotency.leaseMs)';
    const fleet = { ...env, ...redis, SIDECAR_STATE_ACCEPT_UNSIGNED_RECORDS: 'true' };
    assert.equal(loadConfig({ ...fleet, SIDECAR_IDEMPOTENCY_LEASE_MS: '200' }).idempotency.leaseMs, 200);
    refusal(() => loadConfig({ ...fleet, SIDECAR_IDEMPOTENCY_LEASE_MS: '199' }), lease);
    refusal(() => loadConfig({ ...fleet, SIDECAR_REDIS_COMMAND_TIMEOUT_MS: '3000' }), lease);
    assert.equal(
      loadConfig({ ...env, SIDECAR_IDEMPOTENCY_LEASE_MS: '50' }).idempotency.leaseMs,
      50,
      'memory: no renewals',
    );
    for (const value of ['0', '-1', '1.5']) refused({ SIDECAR_IDEMPOTENCY_LEASE_MS: value }, lease);
  });

  it('SIDECAR_IDEMPOTENCY_REQUIRED is a strict boolean', () => {
    assert.equal(loadConfig({ ...env, SIDECAR_IDEMPOTENCY_REQUIRED: 'true' }).idempotency.required, true);
    assert.equal(loadConfig({ ...env, SIDECAR_IDEMPOTENCY_REQUIRED: '0' }).idempotency.required, false);
    for (const value of ['yes', 'on', ''])
      refused({ SIDECAR_IDEMPOTENCY_REQUIRED: value }, 'SIDECAR_IDEMPOTENCY_REQUIRED (idempotency.required)');
  });

  it('SIDECAR_IDEMPOTENCY_TTL_SECONDS is a positive whole number of seconds', () => {
    assert.equal(loadConfig({ ...env, SIDECAR_IDEMPOTENCY_TTL_SECONDS: '600' }).idempotency.ttlSeconds, 600);
    for (const value of ['0', '-1', '1.5', 'a day'])
      refused({ SIDECAR_IDEMPOTENCY_TTL_SECONDS: value }, 'SIDECAR_IDEMPOTENCY_TTL_SECONDS (idempotency.ttlSeconds)');
  });

  it('both can come from the config file', async () => {
    const file = join(keys.dir, 'idempotency.yaml');
    await writeFile(file, 'idempotency:\n  required: true\n  ttlSeconds: 3600\n');
    assert.deepEqual(loadConfig({ ...env, SIDECAR_CONFIG_FILE: file }).idempotency, {
      required: true,
      ttlSeconds: 3600,
      leaseMs: 5_000,
    });
  });
});
