import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { mkdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { before, describe, it } from 'node:test';
import { collectConfig, loadConfig } from '../../src/config/load.js';
import { ConfigError } from '../../src/errors.js';
import { memoryBudget, MIB, POSTBACK_MAX_BODY_BYTES, readProcessMemory } from '../../src/memory/budget.js';
import { DEFAULT_MEMORY_STORE_MAX_ENTRIES } from '../../src/state/memory-store.js';
import { makeKeys, type TestKeys } from '../support/keys.js';
import { productionEnv, refusal, secretFiles } from './support.js';

describe('config: the shared state store (SIDECAR_STATE_STORE, SIDECAR_REDIS_*)', () => {
  let keys: TestKeys;
  let env: NodeJS.ProcessEnv;
  let passwordFile: string;
  let caFile: string;
  let macKeyFile: string;
  const macKey = randomBytes(32);

  before(async () => {
    keys = await makeKeys(2048);
    ({ passwordFile, caFile } = await secretFiles(keys.dir, 'redis', 'redis-secret-pw'));
    macKeyFile = join(keys.dir, 'state-mac-key');
    await writeFile(macKeyFile, `${macKey.toString('base64')}\n`, { mode: 0o600 });
    env = productionEnv(keys.privateKeyFile);
  });

  const redisEnv = (extra: NodeJS.ProcessEnv = {}): NodeJS.ProcessEnv => ({
    ...env,
    SIDECAR_STATE_STORE: 'redis',
    SIDECAR_REDIS_URL: 'rediss://redis.internal:6380/2',
    SIDECAR_STATE_MAC_KEY_FILE: macKeyFile,
    ...extra,
  });

  const refuse = (overrides: NodeJS.ProcessEnv, setting: string, reason: RegExp) => {
    refusal(() => loadConfig(redisEnv(overrides)), setting, reason);
  };

  it('defaults to the memory store, bounded as memory-store.ts says', () => {
    const { state } = loadConfig(env);
    assert.equal(state.store, 'memory');
    assert.equal(state.redis, undefined);
    assert.equal(state.memoryMaxEntries, DEFAULT_MEMORY_STORE_MAX_ENTRIES);
    assert.equal(loadConfig({ ...env, SIDECAR_STATE_MEMORY_MAX_ENTRIES: '500' }).state.memoryMaxEntries, 500);
  });

  it("bounds the memory store by bytes: the store's share of the memory budget, or SIDECAR_STATE_MEMORY_MAX_MB", () => {
    const auto = memoryBudget({
      limitMb: 'auto',
      process: readProcessMemory(),
      maxBodyBytes: 1_048_576,
      maxPostbackBodyBytes: POSTBACK_MAX_BODY_BYTES,
    }).shares.store;
    assert.equal(loadConfig(env).state.memoryMaxBytes, auto);
    assert.equal(loadConfig({ ...env, SIDECAR_STATE_MEMORY_MAX_MB: 'auto' }).state.memoryMaxBytes, auto);
    const set = loadConfig({ ...env, SIDECAR_STATE_MEMORY_MAX_MB: '32' });
    assert.equal(set.state.memoryMaxBytes, 32 * MIB);
    assert.deepEqual(set.warnings, []);
    // A pod of 256 MiB: the store gets its share of what the runtime, headroom and bodies leave.
    const pod = loadConfig({ ...env, SIDECAR_MEMORY_LIMIT_MB: '256' });
    assert.equal(pod.memory.limitBytes, 256 * MIB);
    assert.equal(pod.memory.source, 'setting');
    assert.ok(pod.state.memoryMaxBytes < 80 * MIB, `${pod.state.memoryMaxBytes}`);
  });

  it('refuses a memory store budget that does not fit the memory limit or the old space, in one line with the numbers', () => {
    const message = refusal(
      () => loadConfig({ ...env, SIDECAR_MEMORY_LIMIT_MB: '256', SIDECAR_STATE_MEMORY_MAX_MB: '200' }),
      'SIDECAR_STATE_MEMORY_MAX_MB (state.memoryMaxMb)',
      /200 MiB does not fit the memory limit \(256 MiB, setting\) beside the runtime \(72 MiB\).*at most \d+ MiB; auto gives \d+ MiB/,
    );
    assert.doesNotMatch(message, /\n/);
    const oldSpaceMib = Math.floor(readProcessMemory().oldSpaceBytes / MIB);
    refusal(
      () =>
        loadConfig({ ...env, SIDECAR_MEMORY_LIMIT_MB: '1000000', SIDECAR_STATE_MEMORY_MAX_MB: String(oldSpaceMib) }),
      'SIDECAR_STATE_MEMORY_MAX_MB (state.memoryMaxMb)',
      new RegExp(`does not fit node's old space \\(${oldSpaceMib} MiB\\)`),
    );
    for (const bad of ['0', '-5', 'half', '1.5'])
      refusal(() => loadConfig({ ...env, SIDECAR_STATE_MEMORY_MAX_MB: bad }), 'SIDECAR_STATE_MEMORY_MAX_MB');
  });

  it('refuses a memory limit that cannot hold the runtime and the bodies in flight, naming the setting to change', () => {
    refusal(
      () => loadConfig({ ...env, SIDECAR_MEMORY_LIMIT_MB: '96' }),
      'SIDECAR_MEMORY_LIMIT_MB (memoryLimitMb)',
      /the memory limit \(96 MiB, setting\) cannot hold the runtime \(72 MiB\), headroom \(24 MiB\) and bodies in flight/,
    );
    refusal(
      () => loadConfig({ ...env, SIDECAR_MEMORY_LIMIT_MB: '256', SIDECAR_MAX_BODY_BYTES: String(16 * MIB) }),
      'SIDECAR_MAX_BODY_BYTES (maxBodyBytes)',
      /bodies in flight \(\d+ MiB\): at least \d+ MiB is needed/,
    );
    // A heap that may grow past a known limit is warned about, with the flag that fits.
    const warned = loadConfig({ ...env, SIDECAR_MEMORY_LIMIT_MB: '256' });
    if (readProcessMemory().oldSpaceBytes > 192 * MIB) {
      assert.match(warned.warnings.map((w) => w.message).join('\n'), /--max-old-space-size=192/);
    }
  });

  it('reads every Redis setting, the password from its file without the trailing newline', () => {
    const config = loadConfig(
      redisEnv({
        SIDECAR_REDIS_USERNAME: 'signing-sidecar',
        SIDECAR_REDIS_PASSWORD_FILE: passwordFile,
        SIDECAR_REDIS_CA_FILE: caFile,
        SIDECAR_REDIS_KEY_PREFIX: 'payments-sidecar:',
        SIDECAR_REDIS_COMMAND_TIMEOUT_MS: '250',
      }),
    );
    const redis = config.state.redis!;
    assert.equal(config.state.store, 'redis');
    assert.deepEqual(redis.topology, { mode: 'standalone', url: 'rediss://redis.internal:6380/2' });
    assert.equal(redis.tls, true);
    assert.equal(redis.username, 'signing-sidecar');
    assert.equal(redis.password?.reveal(), 'redis-secret-pw');
    assert.match(redis.ca!, /BEGIN CERTIFICATE/);
    assert.equal(redis.keyPrefix, 'payments-sidecar:');
    assert.equal(redis.commandTimeoutMs, 250);
    assert.equal(JSON.stringify(config).includes('redis-secret-pw'), false, 'the password never serialises');
  });

  it('defaults the prefix to signing-sidecar: and the command timeout to 100 ms', () => {
    const redis = loadConfig(redisEnv()).state.redis!;
    assert.equal(redis.keyPrefix, 'signing-sidecar:');
    assert.equal(redis.commandTimeoutMs, 100);
    assert.equal(redis.password, undefined);
  });

  it('refuses an unknown store', () => refuse({ SIDECAR_STATE_STORE: 'etcd' }, 'SIDECAR_STATE_STORE', /memory.*redis/));
  it('requires SIDECAR_REDIS_URL for the redis store', () =>
    refuse({ SIDECAR_REDIS_URL: '' }, 'SIDECAR_REDIS_URL', /is required when SIDECAR_STATE_STORE=redis/));
  it('refuses text that is not a URL', () =>
    refuse({ SIDECAR_REDIS_URL: 'redis.internal:6379' }, 'SIDECAR_REDIS_URL', /scheme|not a URL/));
  it('refuses another scheme', () =>
    refuse({ SIDECAR_REDIS_URL: 'http://redis.internal:6379' }, 'SIDECAR_REDIS_URL', /use redis:\/\/ or rediss:\/\//));
  it('refuses a path that is not a database number', () =>
    refuse({ SIDECAR_REDIS_URL: 'redis://redis.internal:6379/cache' }, 'SIDECAR_REDIS_URL', /database number/));
  it('refuses a query string', () =>
    refuse({ SIDECAR_REDIS_URL: 'redis://redis.internal:6379?db=1' }, 'SIDECAR_REDIS_URL', /query or fragment/));

  for (const url of [
    'redis://:hunter2@redis.internal:6379',
    'rediss://app:hunter2@redis.internal',
    'redis://@redis.internal',
  ]) {
    it(`refuses credentials in the URL without repeating them (${url.replace('hunter2', '***')})`, () => {
      assert.throws(
        () => loadConfig(redisEnv({ SIDECAR_REDIS_URL: url })),
        (err: unknown) => {
          assert.ok(err instanceof ConfigError);
          assert.match(
            err.message,
            /^SIDECAR_REDIS_URL .*must not carry a username or password; set SIDECAR_REDIS_USERNAME and SIDECAR_REDIS_PASSWORD_FILE/,
          );
          assert.equal(err.message.includes('hunter2'), false);
          return true;
        },
      );
    });
  }

  it('refuses a username without a password file', () =>
    refuse(
      { SIDECAR_REDIS_USERNAME: 'signing-sidecar' },
      'SIDECAR_REDIS_USERNAME',
      /needs SIDECAR_REDIS_PASSWORD_FILE/,
    ));
  it('refuses a password file it cannot read', () =>
    refuse(
      { SIDECAR_REDIS_PASSWORD_FILE: join(keys.dir, 'absent') },
      'SIDECAR_REDIS_PASSWORD_FILE',
      /cannot read file.*ENOENT/,
    ));
  it('refuses an empty password file', async () => {
    const empty = join(keys.dir, 'empty-redis-password');
    await writeFile(empty, '\n');
    refuse({ SIDECAR_REDIS_PASSWORD_FILE: empty }, 'SIDECAR_REDIS_PASSWORD_FILE', /is empty/);
  });
  it('refuses a CA file with a redis:// (plain) URL', () =>
    refuse(
      { SIDECAR_REDIS_URL: 'redis://redis.internal:6379', SIDECAR_REDIS_CA_FILE: caFile },
      'SIDECAR_REDIS_CA_FILE',
      /applies to TLS only/,
    ));
  it('refuses a CA file without a certificate', () =>
    refuse({ SIDECAR_REDIS_CA_FILE: passwordFile }, 'SIDECAR_REDIS_CA_FILE', /holds no PEM certificate/));
  it('refuses an empty key prefix', () =>
    refuse({ SIDECAR_REDIS_KEY_PREFIX: '' }, 'SIDECAR_REDIS_KEY_PREFIX', /must not be empty/));
  it('refuses braces in the key prefix (they would move the hash tag)', () =>
    refuse({ SIDECAR_REDIS_KEY_PREFIX: 'a{b}:' }, 'SIDECAR_REDIS_KEY_PREFIX', /braces/));
  it('refuses a command timeout that is not a positive integer', () =>
    refuse({ SIDECAR_REDIS_COMMAND_TIMEOUT_MS: '0' }, 'SIDECAR_REDIS_COMMAND_TIMEOUT_MS', /positive integer/));
  it('refuses a memory bound that is not a positive integer', () =>
    refuse({ SIDECAR_STATE_MEMORY_MAX_ENTRIES: '-1' }, 'SIDECAR_STATE_MEMORY_MAX_ENTRIES', /positive integer/));

  it('reports every Redis refusal at once', async () => {
    const result = await collectConfig(
      redisEnv({
        SIDECAR_REDIS_URL: 'redis://u:p@redis.internal',
        SIDECAR_REDIS_USERNAME: 'signing-sidecar',
        SIDECAR_REDIS_KEY_PREFIX: '{x}',
      }),
    );
    assert.equal(result.ok, false);
    const named = result.ok ? [] : result.errors.map((err) => err.message.split(' ')[0]);
    assert.deepEqual(named.sort(), ['SIDECAR_REDIS_KEY_PREFIX', 'SIDECAR_REDIS_URL', 'SIDECAR_REDIS_USERNAME']);
  });

  it('warns, without refusing, about plain redis:// in production and Redis settings the memory store ignores', () => {
    const plain = loadConfig(redisEnv({ SIDECAR_REDIS_URL: 'redis://redis.internal:6379' }));
    assert.deepEqual(
      plain.warnings.map((w) => w.setting),
      ['SIDECAR_REDIS_URL (state.redis.url)'],
    );
    assert.match(plain.warnings[0]!.message, /rediss:\/\/ \(TLS\) in production/);
    const staging = loadConfig(
      redisEnv({
        SIDECAR_ENVIRONMENT: 'staging',
        SIDECAR_BASE_URL: 'http://127.0.0.1:9',
        SIDECAR_REDIS_URL: 'redis://127.0.0.1:6379',
      }),
    );
    assert.deepEqual(staging.warnings, []);
    const forgotten = loadConfig({ ...env, SIDECAR_REDIS_URL: 'redis://redis.internal:6379' });
    assert.equal(forgotten.state.store, 'memory');
    assert.match(forgotten.warnings[0]!.message, /SIDECAR_STATE_STORE is memory: Redis is not used/);
  });

  it("a relative sentinelPasswordFile in the config file is read from the file's folder, like every path", async () => {
    const folder = join(keys.dir, 'sentinel-config');
    await mkdir(folder, { recursive: true });
    await writeFile(join(folder, 'spw'), 'sentinel-secret\n', { mode: 0o600 });
    const file = join(folder, 'sidecar.yaml');
    await writeFile(
      file,
      'state:\n  redis:\n    mode: sentinel\n    sentinels: [sentinel.internal:26379]\n    sentinelMaster: mymaster\n    sentinelPasswordFile: spw\n',
    );
    const config = loadConfig({ ...redisEnv({ SIDECAR_REDIS_URL: undefined }), SIDECAR_CONFIG_FILE: file });
    const topology = config.state.redis?.topology;
    assert.equal(topology?.mode, 'sentinel');
    assert.equal(topology.sentinelPasswordFile, join(folder, 'spw'));
    assert.equal(topology.sentinelPassword?.reveal(), 'sentinel-secret');
  });

  describe('the MAC of the records in Redis (SIDECAR_STATE_MAC_KEY_FILE, docs/fleet.md)', () => {
    const keyFile = async (name: string, text: string): Promise<string> => {
      const file = join(keys.dir, name);
      await writeFile(file, text, { mode: 0o600 });
      return file;
    };
    const staging = (extra: NodeJS.ProcessEnv): NodeJS.ProcessEnv =>
      redisEnv({ SIDECAR_ENVIRONMENT: 'staging', SIDECAR_BASE_URL: 'http://127.0.0.1:9', ...extra });

    it('reads the key file: every key, newest first, as secret keys that never serialise', async () => {
      const older = randomBytes(48);
      const file = await keyFile('two-mac-keys', `${macKey.toString('base64url')}\n\n${older.toString('base64')}\n`);
      const config = loadConfig(redisEnv({ SIDECAR_STATE_MAC_KEY_FILE: file }));
      const mac = config.state.redis!.recordMac;
      assert.equal(mac.keyFile, file);
      assert.equal(mac.acceptUnsigned, false);
      assert.deepEqual(
        mac.keys.map((key) => key.export()),
        [macKey, older],
      );
      assert.equal(JSON.stringify(config).includes(macKey.toString('base64')), false);
      assert.deepEqual(config.warnings, []);
    });

    it('is required in production with Redis; the refusal says how to run without', () =>
      refuse(
        { SIDECAR_STATE_MAC_KEY_FILE: '' },
        'SIDECAR_STATE_MAC_KEY_FILE',
        /required in production with SIDECAR_STATE_STORE=redis.*forge.*SIDECAR_STATE_ACCEPT_UNSIGNED_RECORDS=true/,
      ));

    it('turned off explicitly in production, or left unset in staging: started, with a warning', () => {
      for (const config of [
        loadConfig(redisEnv({ SIDECAR_STATE_MAC_KEY_FILE: '', SIDECAR_STATE_ACCEPT_UNSIGNED_RECORDS: 'true' })),
        loadConfig(staging({ SIDECAR_STATE_MAC_KEY_FILE: '' })),
      ]) {
        assert.deepEqual(config.state.redis!.recordMac, { keys: [], keyFile: undefined, acceptUnsigned: true });
        assert.deepEqual(
          config.warnings.map((w) => w.setting),
          ['SIDECAR_STATE_MAC_KEY_FILE (state.macKeyFile)'],
        );
        assert.match(config.warnings[0]!.message, /carry no MAC.*can forge them/);
      }
    });

    it('a key with unsigned records still accepted (a rollout) is warned', () => {
      const config = loadConfig(redisEnv({ SIDECAR_STATE_ACCEPT_UNSIGNED_RECORDS: 'true' }));
      assert.equal(config.state.redis!.recordMac.acceptUnsigned, true);
      assert.equal(config.state.redis!.recordMac.keys.length, 1);
      assert.match(config.warnings[0]!.message, /without a MAC are still read.*rollout/);
    });

    it('refuses a short key, text that is not base64, an empty file, naming the line but never the key', async () => {
      const short = randomBytes(16).toString('base64');
      const cases: Array<[string, RegExp]> = [
        [`${macKey.toString('base64')}\n${short}\n`, /key 2 of 2: 16 bytes; at least 32 random bytes/],
        ['correct horse battery staple correct horse\n', /not base64/],
        ['\n\n', /is empty/],
      ];
      for (const [index, [text, reason]] of cases.entries()) {
        const file = await keyFile(`bad-mac-key-${index}`, text);
        const refused = refusal(
          () => loadConfig(redisEnv({ SIDECAR_STATE_MAC_KEY_FILE: file })),
          'SIDECAR_STATE_MAC_KEY_FILE',
          reason,
        );
        assert.equal(refused.includes(short) || refused.includes('horse'), false, refused);
      }
    });

    it('with the memory store: ignored, with a warning', () => {
      const config = loadConfig({ ...env, SIDECAR_STATE_MAC_KEY_FILE: macKeyFile });
      assert.equal(config.state.redis, undefined);
      assert.match(config.warnings[0]!.message, /SIDECAR_STATE_STORE is memory: Redis is not used/);
      assert.equal(config.warnings[0]!.setting, 'SIDECAR_STATE_MAC_KEY_FILE (state.macKeyFile)');
    });
  });
});
