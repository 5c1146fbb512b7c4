import assert from 'node:assert/strict';
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { loadConfig } from '../../src/config/load.js';
import { SidecarMetrics } from '../../src/observability/metrics.js';
import { openStateStore } from '../../src/state/open-store.js';
import { accountTag } from '../../src/state/redis-keys.js';
import { makeKeys, type TestKeys } from '../support/keys.js';
import { startRedis, type TestRedis } from '../support/redis-server.js';
import { waitFor } from '../support/wait-for.js';

describe('openStateStore: the store SIDECAR_STATE_STORE asks for', () => {
  let keys: TestKeys;
  let redis: TestRedis;
  let env: NodeJS.ProcessEnv;

  before(async () => {
    [keys, redis] = await Promise.all([makeKeys(), startRedis({ user: true })]);
    const password = join(keys.dir, 'password');
    await writeFile(password, 'pw\n');
    env = {
      SIDECAR_BASE_URL: 'http://127.0.0.1:9/gw',
      SIDECAR_ENVIRONMENT: 'staging',
      SIDECAR_USERNAME: 'vendor@example.com',
      SIDECAR_PASSWORD_FILE: password,
      SIDECAR_PRIVATE_KEY_FILE: keys.privateKeyFile,
    };
  });
  after(() => redis.close());

  const metrics = () => new SidecarMetrics({ version: 'test', environment: 'staging', keyFingerprint: 'f' });

  it('memory: bounded by SIDECAR_STATE_MEMORY_MAX_ENTRIES, every eviction counted, always up', async () => {
    const sidecar = metrics();
    const config = loadConfig({ ...env, SIDECAR_STATE_MEMORY_MAX_ENTRIES: '2' });
    const store = await openStateStore(config, { metrics: sidecar.stateStore });
    for (const key of ['a', 'b', 'c', 'd']) await store.setIfAbsent(key, 'v', 60_000);
    assert.equal(await store.get('a'), undefined);
    const text = await sidecar.registry.metrics();
    assert.match(text, /^signing_sidecar_state_store_evictions_total 2$/m);
    assert.match(text, /^signing_sidecar_state_store_up 1$/m);
    // No Redis command is ever sent: the histogram says what it is, with no series.
    assert.match(text, /^# TYPE signing_sidecar_state_store_command_duration_seconds histogram$/m);
    assert.doesNotMatch(text, /^signing_sidecar_state_store_command_duration_seconds/m);
    await store.close();
  });

  it('memory: bounded by SIDECAR_STATE_MEMORY_MAX_MB, its usage and both limits on the metrics', async () => {
    const sidecar = metrics();
    const config = loadConfig({ ...env, SIDECAR_STATE_MEMORY_MAX_MB: '1' });
    const store = await openStateStore(config, { metrics: sidecar.stateStore });
    const quarterMib = 'x'.repeat(256 * 1024);
    for (const key of ['a', 'b', 'c', 'd', 'e']) await store.setIfAbsent(key, quarterMib, 60_000);
    assert.equal(await store.get('a'), undefined);
    assert.equal(await store.get('e'), quarterMib);
    const text = await sidecar.registry.metrics();
    assert.match(text, /^signing_sidecar_state_store_evictions_total 2$/m);
    assert.match(text, /^signing_sidecar_state_store_memory_limit_bytes 1048576$/m);
    assert.match(text, /^signing_sidecar_state_store_memory_entries 3$/m);
    assert.match(text, /^signing_sidecar_state_store_memory_limit_entries 200000$/m);
    const bytes = Number(/^signing_sidecar_state_store_memory_bytes (\d+)$/m.exec(text)?.[1]);
    assert.ok(bytes > 3 * 256 * 1024 && bytes <= 1048576, `${bytes}`);
    await store.close();
  });

  it('redis: connects with the settings, keys scoped by base address + username, commands timed', async () => {
    const sidecar = metrics();
    const config = loadConfig({
      ...env,
      SIDECAR_STATE_STORE: 'redis',
      SIDECAR_REDIS_URL: `${redis.url}/3`,
      SIDECAR_REDIS_USERNAME: redis.username,
      SIDECAR_REDIS_PASSWORD_FILE: redis.passwordFile,
      SIDECAR_REDIS_COMMAND_TIMEOUT_MS: '2000',
    });
    const store = await openStateStore(config, { metrics: sidecar.stateStore });
    assert.equal(store.kind, 'redis');
    assert.equal(store.isAvailable(), true, 'open waits for the first connection');
    await store.setIfAbsent('token:record', '{}', 60_000);
    const tag = accountTag('http://127.0.0.1:9/gw', 'vendor@example.com');
    assert.deepEqual(await redis.cli('-n', '3', '--scan'), [`signing-sidecar:{${tag}}:token:record`]);
    const text = await sidecar.registry.metrics();
    assert.match(text, /^signing_sidecar_state_store_up 1$/m);
    assert.match(
      text,
      /^signing_sidecar_state_store_command_duration_seconds_count\{command="set_if_absent",outcome="ok"\} 1$/m,
    );
    // Every other command x outcome at zero from the start, for rate() to see its first failure.
    assert.match(
      text,
      /^signing_sidecar_state_store_command_duration_seconds_count\{command="wait",outcome="error"\} 0$/m,
    );
    await store.close();
  });

  it('redis: a rotated password file is used by the next connection, without a restart', async (t) => {
    const passwordFile = join(keys.dir, 'redis-password');
    await writeFile(passwordFile, `${redis.password!}\n`);
    const config = loadConfig({
      ...env,
      SIDECAR_STATE_STORE: 'redis',
      SIDECAR_REDIS_URL: redis.url,
      SIDECAR_REDIS_USERNAME: redis.username,
      SIDECAR_REDIS_PASSWORD_FILE: passwordFile,
      SIDECAR_REDIS_COMMAND_TIMEOUT_MS: '2000',
    });
    const store = await openStateStore(config);
    t.after(() => store.close());
    assert.equal(store.isAvailable(), true);
    // The operator's rotation: the user's password replaced, the Secret file updated, then (here forced) the
    // connections dropped, as a Redis restart or failover would.
    const rotated = `rotated-${Date.now()}`;
    await redis.cli('ACL', 'SETUSER', redis.username!, 'resetpass', `>${rotated}`);
    await writeFile(passwordFile, `${rotated}\n`);
    // Recorded as they happen: the reconnection can be quicker than any polling of isAvailable().
    const changes: boolean[] = [];
    store.onAvailabilityChange((available) => changes.push(available));
    await redis.cli('CLIENT', 'KILL', 'USER', redis.username!);
    await waitFor('the condition', () => changes.includes(false) && store.isAvailable());
    assert.equal(await store.setIfAbsent('after-rotation', 'v', 60_000), true);
  });
});
