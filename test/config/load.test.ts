import assert from 'node:assert/strict';
import { chmod, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { before, describe, it } from 'node:test';
import { loadConfig } from '../../src/config/load.js';
import { ConfigError } from '../../src/errors.js';
import { makeKeys, type TestKeys } from '../support/keys.js';

describe('config: refuses to start with one line naming the setting', () => {
  let keys: TestKeys;
  let small: TestKeys;
  let env: NodeJS.ProcessEnv;

  before(async () => {
    [keys, small] = await Promise.all([makeKeys(2048), makeKeys(1024)]);
    env = {
      SIDECAR_BASE_URL: 'https://gateway.example.com',
      SIDECAR_ENVIRONMENT: 'production',
      SIDECAR_USERNAME: 'vendor@example.com',
      SIDECAR_PASSWORD: 'pw',
      SIDECAR_PRIVATE_KEY_FILE: keys.privateKeyFile,
    };
  });

  const refuse = (overrides: NodeJS.ProcessEnv, setting: string, reason: RegExp) => {
    assert.throws(
      () => loadConfig({ ...env, ...overrides }),
      (err: unknown) => {
        assert.ok(err instanceof ConfigError);
        assert.ok(err.message.startsWith(setting), `"${err.message}" names ${setting}`);
        assert.match(err.message, reason);
        assert.equal(err.message.includes('\n'), false);
        return true;
      },
    );
  };

  it('accepts a complete production config and applies defaults', () => {
    const config = loadConfig(env);
    assert.equal(config.base.origin, 'https://gateway.example.com');
    assert.equal(config.listen.host, '127.0.0.1');
    assert.equal(config.listen.port, 8080);
    assert.equal(config.admin.port, 9464);
    assert.equal(config.maxBodyBytes, 1_048_576);
    assert.deepEqual(config.signedRoutes, ['/api/v2/transaction/init', '/api/v2/transfer-out/init']);
    assert.deepEqual(config.upstream.answerCorrelationFields, ['invoice_no']);
    assert.equal(JSON.stringify(config).includes('"pw"'), false, 'the password never serialises');
  });
  it('reads the answer correlation fields as a comma-separated list; empty turns the check off', () => {
    const fields = (value: string) =>
      loadConfig({ ...env, SIDECAR_ANSWER_CORRELATION_FIELDS: value }).upstream.answerCorrelationFields;
    assert.deepEqual(fields('invoice_no, order_id'), ['invoice_no', 'order_id']);
    assert.deepEqual(fields(''), []);
  });

  for (const name of ['SIDECAR_BASE_URL', 'SIDECAR_ENVIRONMENT', 'SIDECAR_USERNAME', 'SIDECAR_PRIVATE_KEY_FILE']) {
    it(`refuses a missing ${name}`, () => refuse({ [name]: undefined }, name, /is required/));
  }
  it('refuses when neither password setting is given', () =>
    refuse({ SIDECAR_PASSWORD: undefined }, 'SIDECAR_PASSWORD_FILE', /required/));
  it('refuses an unreadable password file', () =>
    refuse({ SIDECAR_PASSWORD_FILE: '/nonexistent/pw' }, 'SIDECAR_PASSWORD_FILE', /cannot read/));
  it('refuses an unreadable key file', () =>
    refuse({ SIDECAR_PRIVATE_KEY_FILE: '/nonexistent/key.pem' }, 'SIDECAR_PRIVATE_KEY_FILE', /cannot read.*ENOENT/));
  it('refuses a key file that is not a PEM private key', async () => {
    const file = join(keys.dir, 'not-a-key.pem');
    await writeFile(file, keys.publicKeyPem);
    refuse({ SIDECAR_PRIVATE_KEY_FILE: file }, 'SIDECAR_PRIVATE_KEY_FILE', /not a PEM private key/);
  });
  it('refuses a key under 2048 bits', () =>
    refuse({ SIDECAR_PRIVATE_KEY_FILE: small.privateKeyFile }, 'SIDECAR_PRIVATE_KEY_FILE', /1024 bits; at least 2048/));
  it('accepts a PKCS#1 key as well as PKCS#8', async () => {
    const pkcs1 = await makeKeys(2048, 'pkcs1');
    assert.match(pkcs1.privateKeyPem, /BEGIN RSA PRIVATE KEY/);
    assert.equal(
      loadConfig({ ...env, SIDECAR_PRIVATE_KEY_FILE: pkcs1.privateKeyFile }).privateKey.asymmetricKeyType,
      'rsa',
    );
  });
  it('refuses a base URL that is not absolute', () =>
    refuse({ SIDECAR_BASE_URL: 'gateway.example.com/api' }, 'SIDECAR_BASE_URL', /not an absolute URL/));
  it('refuses a base URL with a query', () =>
    refuse({ SIDECAR_BASE_URL: 'https://gateway.example.com/?env=1' }, 'SIDECAR_BASE_URL', /query/));
  it('refuses a base URL with a fragment', () =>
    refuse({ SIDECAR_BASE_URL: 'https://gateway.example.com/#x' }, 'SIDECAR_BASE_URL', /fragment/));
  it('refuses http:// for a non-loopback host', () =>
    refuse(
      { SIDECAR_BASE_URL: 'http://gateway.example.com', SIDECAR_ENVIRONMENT: 'staging' },
      'SIDECAR_BASE_URL',
      /loopback/,
    ));
  it('refuses http:// in production even on loopback', () =>
    refuse({ SIDECAR_BASE_URL: 'http://127.0.0.1:9000' }, 'SIDECAR_BASE_URL', /production requires/));
  it('accepts http:// on loopback for staging (simulator, tests)', () => {
    assert.equal(
      loadConfig({ ...env, SIDECAR_ENVIRONMENT: 'staging', SIDECAR_BASE_URL: 'http://localhost:9000/gw/' }).base
        .pathPrefix,
      '/gw',
    );
  });
  it('refuses an environment other than staging/production', () =>
    refuse({ SIDECAR_ENVIRONMENT: 'prod' }, 'SIDECAR_ENVIRONMENT', /staging or production/));
  it('refuses a non-numeric port, naming the env var', () =>
    refuse({ SIDECAR_LISTEN_PORT: 'eighty' }, 'SIDECAR_LISTEN_PORT (listen.port)', /port/));

  it('reads a YAML config file, with env vars taking precedence over it', async () => {
    const file = join(keys.dir, 'sidecar.yaml');
    await writeFile(file, 'username: file@example.com\nlisten:\n  port: 9000\nmaxBodyBytes: 2048\n');
    const config = loadConfig({ ...env, SIDECAR_CONFIG_FILE: file, SIDECAR_LISTEN_PORT: '9100' });
    assert.equal(config.username, 'vendor@example.com');
    assert.equal(config.listen.port, 9100);
    assert.equal(config.maxBodyBytes, 2048);
  });
  for (const [name, text] of [
    ['JSON', '{"username": "u@example.com", "password": hunter2-secret}'],
    ['YAML', 'username: u@example.com\npassword: "hunter2-secret\nlisten: [\n'],
  ] as const) {
    it(`a ${name} syntax error names the file and position but never quotes its content`, async () => {
      const file = join(keys.dir, `broken.${name === 'JSON' ? 'json' : 'yaml'}`);
      await writeFile(file, text);
      assert.throws(
        () => loadConfig({ ...env, SIDECAR_CONFIG_FILE: file }),
        (err: unknown) => {
          assert.ok(err instanceof ConfigError);
          assert.match(err.message, /^SIDECAR_CONFIG_FILE: cannot load .*: syntax error/);
          assert.equal(err.message.includes('hunter2'), false, err.message);
          return true;
        },
      );
    });
  }
  it('refuses unknown keys in the config file', async () => {
    const file = join(keys.dir, 'typo.json');
    await writeFile(file, JSON.stringify({ baseURL: 'https://x' }));
    refuse({ SIDECAR_CONFIG_FILE: file }, 'config', /baseURL/);
  });
  it('reads the password from a file, without its trailing newline', async () => {
    const file = join(keys.dir, 'password');
    await writeFile(file, 's3cret\n');
    await chmod(file, 0o600);
    assert.equal(
      loadConfig({ ...env, SIDECAR_PASSWORD: undefined, SIDECAR_PASSWORD_FILE: file }).password.reveal(),
      's3cret',
    );
  });
});
