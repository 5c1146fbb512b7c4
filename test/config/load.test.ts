import assert from 'node:assert/strict';
import { chmod, mkdir, writeFile } from 'node:fs/promises';
import { join, relative } from 'node:path';
import { before, describe, it } from 'node:test';
import { collectConfig, loadConfig } from '../../src/config/load.js';
import { isLoopbackHost } from '../../src/config/loopback.js';
import { EVERY_SETTING } from '../../src/config/schema.js';
import { ConfigError } from '../../src/errors.js';
import { makeKeys, type TestKeys } from '../support/keys.js';
import type { Config } from '../../src/config/config.js';
import type { FileSignerConfig } from '../../src/config/signer-settings.js';
import { productionEnv, refusal } from './support.js';

function fileSigner(config: Config): FileSignerConfig {
  if (config.signer.kind !== 'file') assert.fail(`signer ${config.signer.kind}, not file`);
  return config.signer;
}

describe('config: refuses to start with one line naming the setting', () => {
  let keys: TestKeys;
  let small: TestKeys;
  let env: NodeJS.ProcessEnv;

  before(async () => {
    [keys, small] = await Promise.all([makeKeys(2048), makeKeys(1024)]);
    env = productionEnv(keys.privateKeyFile);
  });

  const refuse = (overrides: NodeJS.ProcessEnv, setting: string, reason: RegExp) => {
    const message = refusal(() => loadConfig({ ...env, ...overrides }), setting, reason);
    assert.equal(message.includes('\n'), false);
  };

  it("tracing: on from the OpenTelemetry SDK's endpoint, propagation to the gateway off unless set", () => {
    assert.deepEqual(loadConfig(env).tracing, { enabled: false, propagateUpstream: false });
    const on = loadConfig({
      ...env,
      OTEL_EXPORTER_OTLP_ENDPOINT: 'http://collector:4318',
      SIDECAR_TRACE_PROPAGATE_UPSTREAM: 'true',
    });
    assert.deepEqual(on.tracing, { enabled: true, propagateUpstream: true });
    refuse({ SIDECAR_TRACE_PROPAGATE_UPSTREAM: 'yes' }, 'SIDECAR_TRACE_PROPAGATE_UPSTREAM', /./);
  });

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
    refuse(
      { SIDECAR_PASSWORD: undefined, SIDECAR_PASSWORD_FILE: '/nonexistent/pw' },
      'SIDECAR_PASSWORD_FILE',
      /cannot read/,
    ));
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
      fileSigner(loadConfig({ ...env, SIDECAR_PRIVATE_KEY_FILE: pkcs1.privateKeyFile })).privateKey.asymmetricKeyType,
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
    refuse(
      { SIDECAR_ENVIRONMENT: 'prod' },
      'SIDECAR_ENVIRONMENT',
      /one of the possible values: \["staging","production"\]/,
    ));
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
  it('names a nested unknown key, and a value written where a group of settings belongs', async () => {
    const file = join(keys.dir, 'misplaced.json');
    await writeFile(file, JSON.stringify({ upstream: { connection: 5 }, listen: 8080 }));
    const result = await collectConfig({ ...env, SIDECAR_CONFIG_FILE: file });
    assert.deepEqual(result.ok ? [] : result.errors.map((err) => err.message), [
      "config: configuration param 'listen.host' missing from config, did you override its parent?",
      "config: configuration param 'listen.port' missing from config, did you override its parent?",
      "config: configuration param 'listen.allowNonLoopback' missing from config, did you override its parent?",
      "config: configuration param 'listen.allowedHosts' missing from config, did you override its parent?",
      "config: configuration param 'listen' not declared in the schema",
      "config: configuration param 'upstream.connection' not declared in the schema; did you mean 'upstream.connections'?",
    ]);
  });
  it('a refused value is quoted, except a secret', async () => {
    const file = join(keys.dir, 'typed.json');
    await writeFile(file, JSON.stringify({ admin: { host: 42 }, password: 12345678, maxBodyBytes: 1.5 }));
    const result = await collectConfig({ ...env, SIDECAR_PASSWORD: undefined, SIDECAR_CONFIG_FILE: file });
    assert.deepEqual(result.ok ? [] : result.errors.map((err) => err.message), [
      'SIDECAR_PASSWORD (password): must be of type String',
      'SIDECAR_ADMIN_HOST (admin.host): must be of type String: value was 42',
      'SIDECAR_MAX_BODY_BYTES (maxBodyBytes): must be a positive integer: value was 1.5',
    ]);
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

  // convict's own Boolean reads any text but "false" as true; the sidecar's booleans must not.
  describe('booleans are strict', () => {
    for (const [name, key] of [
      ['SIDECAR_QUIT_ENDPOINT', 'shutdown.quitEndpoint'],
      ['SIDECAR_LISTEN_ALLOW_NON_LOOPBACK', 'listen.allowNonLoopback'],
    ] as const) {
      const read = (value: string) => {
        const config = loadConfig({ ...env, [name]: value });
        return key === 'shutdown.quitEndpoint' ? config.shutdown.quitEndpoint : config.listen.allowNonLoopback;
      };
      it(`${name}: true, 1 (and TRUE) are true; false, 0 are false`, () => {
        for (const value of ['true', '1', 'TRUE', 'True']) assert.equal(read(value), true, value);
        for (const value of ['false', '0', 'FALSE']) assert.equal(read(value), false, value);
      });
      for (const value of ['', 'no', 'off', 'yes', 'on', ' true', '2', 'enabled']) {
        it(`${name}=${JSON.stringify(value)} is refused, naming the env var`, () =>
          refuse({ [name]: value }, `${name} (${key}): must be true or false`, /\(or 1 or 0\)/));
      }
    }
    it('in a config file: a boolean or the same words, nothing else', async () => {
      const file = join(keys.dir, 'bools.yaml');
      await writeFile(file, 'shutdown:\n  quitEndpoint: true\n');
      assert.equal(loadConfig({ ...env, SIDECAR_CONFIG_FILE: file }).shutdown.quitEndpoint, true);
      await writeFile(file, 'shutdown:\n  quitEndpoint: "0"\n');
      assert.equal(loadConfig({ ...env, SIDECAR_CONFIG_FILE: file }).shutdown.quitEndpoint, false);
      await writeFile(file, 'shutdown:\n  quitEndpoint: "off"\n');
      refuse({ SIDECAR_CONFIG_FILE: file }, 'SIDECAR_QUIT_ENDPOINT (shutdown.quitEndpoint)', /must be true or false/);
    });
    it('every boolean setting of the schema uses the strict format', () => {
      const loose = EVERY_SETTING.filter(
        (setting) => typeof setting.default === 'boolean' && setting.format !== 'strict-boolean',
      ).map((setting) => setting.key);
      assert.deepEqual(loose, []);
    });
  });

  // An empty route list would start a sidecar that answers every payment 404 while /readyz says ok: it is refused.
  describe('signed routes', () => {
    for (const value of ['', ',', ' , ']) {
      it(`SIDECAR_SIGNED_ROUTES=${JSON.stringify(value)} is refused`, () =>
        refuse({ SIDECAR_SIGNED_ROUTES: value }, 'SIDECAR_SIGNED_ROUTES (signedRoutes)', /lists no path/));
    }
    it('an empty list in the config file is refused', async () => {
      const file = join(keys.dir, 'no-routes.json');
      await writeFile(file, JSON.stringify({ signedRoutes: [] }));
      refuse({ SIDECAR_CONFIG_FILE: file }, 'SIDECAR_SIGNED_ROUTES (signedRoutes)', /lists no path/);
    });
    it('every bad route is named in one refusal', () =>
      refuse(
        { SIDECAR_SIGNED_ROUTES: '/ok, api/v2/x, /y?z=1' },
        'SIDECAR_SIGNED_ROUTES (signedRoutes)',
        /"api\/v2\/x", "\/y\?z=1": each must be a path/,
      ));
  });

  // The password from one source only: with both set, one would silently win over the other.
  describe('password: one source only', () => {
    it('SIDECAR_PASSWORD and SIDECAR_PASSWORD_FILE both set is refused', async () => {
      const file = join(keys.dir, 'password-both');
      await writeFile(file, 'from-file\n', { mode: 0o600 });
      refuse(
        { SIDECAR_PASSWORD: 'inline', SIDECAR_PASSWORD_FILE: file },
        'SIDECAR_PASSWORD_FILE (passwordFile) / SIDECAR_PASSWORD (password)',
        /both are set; set only one/,
      );
    });
    it('also when one comes from the config file and the other from the environment', async () => {
      const file = join(keys.dir, 'password-in-file.yaml');
      await writeFile(file, 'password: inline-in-file\n');
      const passwordFile = join(keys.dir, 'password-both');
      await writeFile(passwordFile, 'from-file\n', { mode: 0o600 });
      refuse(
        { SIDECAR_PASSWORD: undefined, SIDECAR_CONFIG_FILE: file, SIDECAR_PASSWORD_FILE: passwordFile },
        'SIDECAR_PASSWORD_FILE (passwordFile) / SIDECAR_PASSWORD (password)',
        /both are set/,
      );
    });
  });

  // The sidecar signs for whoever reaches its egress listener: loopback only, unless a non-loopback host is allowed.
  describe('listen host: loopback unless explicitly allowed', () => {
    it('loopback is 127.0.0.0/8, ::1 and localhost', () => {
      for (const host of [
        '127.0.0.1',
        '127.1.2.3',
        '::1',
        '0:0:0:0:0:0:0:1',
        '::ffff:127.0.0.1',
        'localhost',
        'LOCALHOST',
      ]) {
        assert.equal(isLoopbackHost(host), true, host);
      }
      for (const host of ['0.0.0.0', '::', '10.0.0.7', '128.0.0.1', 'sidecar.example', '', '[::1]']) {
        assert.equal(isLoopbackHost(host), false, host);
      }
    });
    it('a loopback host is accepted without a warning', () => {
      for (const host of ['127.0.0.1', '::1', 'localhost']) {
        const config = loadConfig({ ...env, SIDECAR_LISTEN_HOST: host });
        assert.equal(config.listen.host, host);
        assert.deepEqual(config.warnings, []);
      }
    });
    for (const host of ['0.0.0.0', '::', '10.0.0.7', 'sidecar.example']) {
      it(`${host} is refused without SIDECAR_LISTEN_ALLOW_NON_LOOPBACK`, () =>
        refuse(
          { SIDECAR_LISTEN_HOST: host },
          'SIDECAR_LISTEN_HOST (listen.host)',
          /is not loopback .* set SIDECAR_LISTEN_ALLOW_NON_LOOPBACK \(listen\.allowNonLoopback\) to true/,
        ));
    }
    it('an empty host (every interface) is refused even when allowed', () =>
      refuse(
        { SIDECAR_LISTEN_HOST: '', SIDECAR_LISTEN_ALLOW_NON_LOOPBACK: 'true' },
        'SIDECAR_LISTEN_HOST (listen.host)',
        /empty, which listens on every interface/,
      ));
    it('allowed explicitly, it starts with a warning naming the setting', () => {
      const config = loadConfig({ ...env, SIDECAR_LISTEN_HOST: '0.0.0.0', SIDECAR_LISTEN_ALLOW_NON_LOOPBACK: 'true' });
      assert.equal(config.listen.host, '0.0.0.0');
      assert.equal(config.listen.allowNonLoopback, true);
      assert.equal(config.warnings.length, 1);
      assert.equal(config.warnings[0]?.setting, 'SIDECAR_LISTEN_HOST (listen.host)');
      assert.match(config.warnings[0]?.message ?? '', /"0\.0\.0\.0" is not loopback .*no authentication/);
    });
    it('allowed by the config file key listen.allowNonLoopback too', async () => {
      const file = join(keys.dir, 'exposed.yaml');
      await writeFile(file, 'listen:\n  host: 0.0.0.0\n  allowNonLoopback: true\n');
      assert.equal(loadConfig({ ...env, SIDECAR_CONFIG_FILE: file }).warnings.length, 1);
    });
    it('collectConfig refuses a host that does not resolve, naming the setting', async () => {
      const result = await collectConfig({
        ...env,
        SIDECAR_LISTEN_HOST: 'sidecar.invalid',
        SIDECAR_LISTEN_ALLOW_NON_LOOPBACK: 'true',
        SIDECAR_ADMIN_HOST: 'admin.invalid',
      });
      assert.equal(result.ok, false);
      const messages = result.ok ? [] : result.errors.map((err) => err.message);
      assert.equal(messages.length, 2, messages.join('\n'));
      assert.match(
        messages[0] ?? '',
        /^SIDECAR_LISTEN_HOST \(listen\.host\): cannot resolve "sidecar\.invalid" \(E\w+\)$/,
      );
      assert.match(messages[1] ?? '', /^SIDECAR_ADMIN_HOST \(admin\.host\): cannot resolve "admin\.invalid"/);
    });
  });

  describe('allowed Host names and forwarded headers', () => {
    it('SIDECAR_LISTEN_ALLOWED_HOSTS: names and addresses, lowercase, brackets dropped; none by default', () => {
      assert.deepEqual(loadConfig(env).listen.allowedHosts, []);
      const config = loadConfig({
        ...env,
        SIDECAR_LISTEN_ALLOWED_HOSTS: 'Payments-Sidecar, sidecar.ns.svc,10.0.0.5,[::2],',
      });
      assert.deepEqual(config.listen.allowedHosts, ['payments-sidecar', 'sidecar.ns.svc', '10.0.0.5', '::2']);
    });
    for (const value of ['sidecar:8080', '*.svc', 'http://sidecar', '.svc']) {
      it(`SIDECAR_LISTEN_ALLOWED_HOSTS=${value} is refused: a host name or address, no port or wildcard`, () =>
        refuse(
          { SIDECAR_LISTEN_ALLOWED_HOSTS: value },
          'SIDECAR_LISTEN_ALLOWED_HOSTS (listen.allowedHosts)',
          /must be a host name or an IP address, without port, scheme or wildcard/,
        ));
    }
    it('SIDECAR_FORWARD_REQUEST_HEADERS adds to Accept, Accept-Language, User-Agent and X-Request-Id', () => {
      const defaults = ['accept', 'accept-language', 'user-agent', 'x-request-id'];
      assert.deepEqual(loadConfig(env).forwardedRequestHeaders, defaults);
      const config = loadConfig({ ...env, SIDECAR_FORWARD_REQUEST_HEADERS: 'X-Tenant, user-agent,' });
      assert.deepEqual(config.forwardedRequestHeaders, [...defaults, 'x-tenant']);
    });
    for (const name of [
      'Authorization',
      'X-Signature',
      'x-timestamp',
      'X-Nonce',
      'Host',
      'Content-Length',
      'Content-Type',
      'Idempotency-Key',
      'Connection',
      'Transfer-Encoding',
      'Cookie',
      'Forwarded',
      'X-Forwarded-For',
      'X-Forwarded-Anything',
      'traceparent',
      'Baggage',
    ]) {
      it(`SIDECAR_FORWARD_REQUEST_HEADERS refuses ${name}, a header the sidecar owns`, () =>
        refuse(
          { SIDECAR_FORWARD_REQUEST_HEADERS: `X-Tenant,${name}` },
          'SIDECAR_FORWARD_REQUEST_HEADERS (forwardRequestHeaders)',
          new RegExp(
            `^SIDECAR_FORWARD_REQUEST_HEADERS \\(forwardRequestHeaders\\): ${name}: set by the sidecar itself`,
          ),
        ));
    }
    it('SIDECAR_FORWARD_REQUEST_HEADERS refuses what is not a header name', () =>
      refuse(
        { SIDECAR_FORWARD_REQUEST_HEADERS: 'X Tenant,X-Ok,Ünicode' },
        'SIDECAR_FORWARD_REQUEST_HEADERS (forwardRequestHeaders)',
        /"X Tenant", "Ünicode": not a header name/,
      ));
  });

  // Relative paths in a config file resolve against the file's folder, as the simulator's --config does.
  describe('relative paths', () => {
    it("paths in the config file resolve against the file's folder, whatever the working directory", async () => {
      const folder = join(keys.dir, 'conf');
      await mkdir(join(folder, 'secrets'), { recursive: true });
      await writeFile(join(folder, 'secrets', 'key.pem'), keys.privateKeyPem, { mode: 0o600 });
      await writeFile(join(folder, 'secrets', 'password'), 'from-folder\n', { mode: 0o600 });
      await writeFile(join(folder, 'ca.pem'), '-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n');
      const file = join(folder, 'sidecar.yaml');
      await writeFile(
        file,
        'privateKeyFile: secrets/key.pem\npasswordFile: ./secrets/password\nupstream:\n  caFile: ca.pem\n',
      );
      const config = loadConfig({
        ...env,
        SIDECAR_PASSWORD: undefined,
        SIDECAR_PRIVATE_KEY_FILE: undefined,
        // A relative SIDECAR_CONFIG_FILE is itself relative to the working directory.
        SIDECAR_CONFIG_FILE: relative(process.cwd(), file),
      });
      assert.equal(fileSigner(config).privateKeyFile, join(folder, 'secrets', 'key.pem'));
      assert.equal(config.password.reveal(), 'from-folder');
      assert.match(config.upstream.ca ?? '', /BEGIN CERTIFICATE/);
    });
    it('a relative path from an env var stays relative to the working directory, config file or not', async () => {
      const folder = join(keys.dir, 'elsewhere');
      await mkdir(folder, { recursive: true });
      const file = join(folder, 'sidecar.json');
      await writeFile(file, JSON.stringify({ privateKeyFile: 'not-here.pem' }));
      const fromCwd = relative(process.cwd(), keys.privateKeyFile);
      const config = loadConfig({ ...env, SIDECAR_CONFIG_FILE: file, SIDECAR_PRIVATE_KEY_FILE: fromCwd });
      assert.equal(fileSigner(config).privateKeyFile, fromCwd);
    });
    // What makes each group read its path settings; the setting under test comes from the file alone (its env var
    // is unset). A path setting missing here fails the walk below: add what makes its group read it.
    const readers: ReadonlyArray<readonly [prefix: string, env: NodeJS.ProcessEnv]> = [
      ['passwordFile', { SIDECAR_PASSWORD: undefined }],
      ['privateKeyFile', {}],
      [
        'pkcs11.',
        {
          SIDECAR_SIGNER: 'pkcs11',
          SIDECAR_PRIVATE_KEY_FILE: undefined,
          SIDECAR_PKCS11_MODULE: '/opt/hsm/module.so',
          SIDECAR_PKCS11_TOKEN_LABEL: 'token',
          SIDECAR_PKCS11_KEY_LABEL: 'key',
        },
      ],
      ['upstream.caFile', {}],
      ['limitsFile', {}],
      [
        'upstream.proxy.passwordFile',
        { SIDECAR_UPSTREAM_PROXY_URL: 'http://proxy.example:3128', SIDECAR_UPSTREAM_PROXY_USERNAME: 'user' },
      ],
      ['upstream.proxy.caFile', { SIDECAR_UPSTREAM_PROXY_URL: 'https://proxy.example:3129' }],
      [
        'postback.',
        {
          SIDECAR_POSTBACK_FORWARD_URL: 'http://127.0.0.1:3000/postbacks',
          SIDECAR_POSTBACK_PUBLIC_URL: 'https://sidecar.example/postbacks',
        },
      ],
      [
        'state.redis.sentinelPasswordFile',
        {
          SIDECAR_STATE_STORE: 'redis',
          SIDECAR_REDIS_MODE: 'sentinel',
          SIDECAR_REDIS_SENTINELS: 'sentinel.internal:26379',
          SIDECAR_REDIS_SENTINEL_MASTER: 'mymaster',
        },
      ],
      ['state.', { SIDECAR_STATE_STORE: 'redis', SIDECAR_REDIS_URL: 'rediss://redis.internal:6380' }],
    ];

    it("every path setting of the schema, written relative in the config file, is looked for in the file's folder", async () => {
      const folder = join(keys.dir, 'every-path');
      await mkdir(folder, { recursive: true });
      const pin = join(keys.dir, 'every-path-pin');
      await writeFile(pin, '1234\n', { mode: 0o600 });
      const paths = EVERY_SETTING.filter((setting) => setting.format === 'file-path');
      assert.ok(paths.some((setting) => setting.key === 'state.redis.sentinelPasswordFile'));
      for (const setting of paths) {
        const reader = readers.find(([prefix]) => setting.key === prefix || setting.key.startsWith(prefix));
        assert.ok(reader, `${setting.key}: no entry in readers`);
        const name = `absent-${setting.key}`;
        const tree: Record<string, unknown> = {};
        const parts = setting.key.split('.');
        let group = tree;
        for (const part of parts.slice(0, -1)) group = (group[part] ??= {}) as Record<string, unknown>;
        group[parts.at(-1)!] = name;
        const file = join(folder, `${setting.key}.json`);
        await writeFile(file, JSON.stringify(tree));
        const result = await collectConfig({
          ...env,
          SIDECAR_PKCS11_PIN_FILE: reader[0] === 'pkcs11.' ? pin : undefined,
          ...reader[1],
          [setting.env]: undefined,
          SIDECAR_CONFIG_FILE: file,
        });
        // Either refused for the file it looked for, or (the PKCS#11 module, opened later) configured with it.
        const outcome = result.ok ? JSON.stringify(result.config) : result.errors.map((err) => err.message).join('\n');
        const expected = join(folder, name);
        assert.ok(outcome.includes(result.ok ? `"${expected}"` : `file ${expected}:`), `${setting.key}: ${outcome}`);
      }
    });
    it('every *_FILE setting is a path setting (so it is resolved like the others)', () => {
      for (const setting of EVERY_SETTING.filter(({ env: name }) => name.endsWith('_FILE'))) {
        assert.equal(setting.format, 'file-path', setting.key);
      }
    });
    it('a refusal names the resolved path, so the operator sees which file was looked for', async () => {
      const folder = join(keys.dir, 'missing-key');
      await mkdir(folder, { recursive: true });
      const file = join(folder, 'sidecar.json');
      await writeFile(file, JSON.stringify({ privateKeyFile: 'key.pem' }));
      refuse(
        { SIDECAR_CONFIG_FILE: file, SIDECAR_PRIVATE_KEY_FILE: undefined },
        'SIDECAR_PRIVATE_KEY_FILE',
        new RegExp(`cannot read file ${join(folder, 'key.pem').replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}: ENOENT`),
      );
    });
  });

  // Every refusal of one load is reported at once (`check` and `serve` print them all), not only the first.
  describe('every refusal at once', () => {
    const many: NodeJS.ProcessEnv = {
      SIDECAR_BASE_URL: undefined,
      SIDECAR_LISTEN_PORT: 'eighty',
      SIDECAR_QUIT_ENDPOINT: 'no',
      SIDECAR_SIGNED_ROUTES: ',',
      SIDECAR_PASSWORD_FILE: '/nonexistent/pw',
      SIDECAR_LISTEN_HOST: '0.0.0.0',
      SIDECAR_TOKEN_REFRESH_AHEAD_MIN_SECONDS: '500',
    };
    it('collectConfig returns one ConfigError per refused setting, each naming it', async () => {
      const result = await collectConfig({ ...env, ...many });
      assert.equal(result.ok, false);
      const messages = result.ok ? [] : result.errors.map((err) => err.message);
      for (const setting of [
        'SIDECAR_LISTEN_PORT (listen.port)',
        'SIDECAR_QUIT_ENDPOINT (shutdown.quitEndpoint)',
        'SIDECAR_BASE_URL (baseUrl)',
        'SIDECAR_PASSWORD_FILE (passwordFile) / SIDECAR_PASSWORD (password)',
        'SIDECAR_TOKEN_REFRESH_AHEAD_MIN_SECONDS (token.refreshAheadMinSeconds)',
        'SIDECAR_SIGNED_ROUTES (signedRoutes)',
        'SIDECAR_LISTEN_HOST (listen.host)',
      ]) {
        assert.equal(
          messages.filter((m) => m.startsWith(`${setting}: `)).length,
          1,
          `${setting} in\n${messages.join('\n')}`,
        );
      }
      assert.equal(messages.length, 7, messages.join('\n'));
      assert.ok(messages.every((m) => !m.includes('\n')));
    });
    it('a refused value is not judged again by the checks that read it', async () => {
      const result = await collectConfig({ ...env, SIDECAR_TOKEN_REFRESH_AHEAD_MAX_SECONDS: '0' });
      const messages = result.ok ? [] : result.errors.map((err) => err.message);
      assert.deepEqual(messages, [
        'SIDECAR_TOKEN_REFRESH_AHEAD_MAX_SECONDS (token.refreshAheadMaxSeconds): must be a positive integer',
      ]);
    });
    it('loadConfig still throws the first one', () =>
      refuse(many, 'SIDECAR_LISTEN_PORT (listen.port)', /ports must be within range/));
    it('a config file that cannot be loaded is reported alone (nothing else can be judged without it)', async () => {
      const result = await collectConfig({ ...env, ...many, SIDECAR_CONFIG_FILE: join(keys.dir, 'absent.yaml') });
      assert.equal(result.ok, false);
      assert.deepEqual(result.ok ? [] : result.errors.map((err) => err.message), [
        `SIDECAR_CONFIG_FILE: cannot load ${join(keys.dir, 'absent.yaml')}: cannot read it (ENOENT)`,
      ]);
    });
  });
});
