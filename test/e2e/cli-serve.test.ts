import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { once } from 'node:events';
import { describe, it } from 'node:test';
import { makeKeys, type TestKeys } from '../support/keys.js';

const MAIN = new URL('../../src/main.ts', import.meta.url).pathname;

function serve(env: NodeJS.ProcessEnv) {
  // Only PATH is inherited: the sidecar must not pick up settings from the developer's own environment.
  return spawnSync(process.execPath, ['--import', 'tsx', MAIN, 'serve'], {
    env: { PATH: process.env.PATH, ...env },
    encoding: 'utf8',
    timeout: 20_000,
  });
}

/** A complete configuration, listeners on free loopback ports. */
function validEnv(keys: TestKeys): NodeJS.ProcessEnv {
  return {
    SIDECAR_BASE_URL: 'https://gateway.example.com',
    SIDECAR_ENVIRONMENT: 'production',
    SIDECAR_USERNAME: 'u@example.com',
    SIDECAR_PASSWORD: 'hunter2-secret',
    SIDECAR_PRIVATE_KEY_FILE: keys.privateKeyFile,
    SIDECAR_LISTEN_PORT: '0',
    SIDECAR_ADMIN_HOST: '127.0.0.1',
    SIDECAR_ADMIN_PORT: '0',
    SIDECAR_SHUTDOWN_DRAIN_DELAY_MS: '0',
    SIDECAR_SHUTDOWN_MAX_DELAY_MS: '1000',
  };
}

const CONFIG_ERROR = 'signing-sidecar: configuration error: ';

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

  it('several refused settings: exit 2, one stderr line each, all of them', async () => {
    const keys = await makeKeys();
    const result = serve({
      ...validEnv(keys),
      SIDECAR_BASE_URL: undefined,
      SIDECAR_QUIT_ENDPOINT: 'off',
      SIDECAR_SIGNED_ROUTES: '',
      SIDECAR_PASSWORD_FILE: '/run/secrets/password',
      SIDECAR_LISTEN_HOST: '0.0.0.0',
    });
    assert.equal(result.status, 2);
    assert.equal(result.stdout, '');
    const lines = result.stderr.split('\n').filter((line) => line !== '');
    assert.equal(lines.length, 5, result.stderr);
    assert.ok(
      lines.every((line) => line.startsWith(CONFIG_ERROR)),
      result.stderr,
    );
    for (const setting of [
      'SIDECAR_QUIT_ENDPOINT (shutdown.quitEndpoint): must be true or false',
      'SIDECAR_BASE_URL (baseUrl): is required',
      'SIDECAR_PASSWORD_FILE (passwordFile) / SIDECAR_PASSWORD (password): both are set',
      'SIDECAR_SIGNED_ROUTES (signedRoutes): lists no path',
      'SIDECAR_LISTEN_HOST (listen.host): "0.0.0.0" is not loopback',
    ]) {
      assert.ok(
        lines.some((line) => line.startsWith(`${CONFIG_ERROR}${setting}`)),
        `${setting} in\n${result.stderr}`,
      );
    }
    assert.equal(result.stderr.includes('hunter2-secret'), false);
  });

  it('a misspelled setting: exit 2, one stderr line naming the setting meant, nothing on stdout', async () => {
    const keys = await makeKeys();
    const result = serve({ ...validEnv(keys), SIDECAR_IDEMPOTENCY_REQUIERD: 'true' });
    assert.equal(result.status, 2, result.stderr);
    assert.equal(result.stdout, '');
    assert.equal(
      result.stderr,
      `${CONFIG_ERROR}SIDECAR_IDEMPOTENCY_REQUIERD: is not a setting; did you mean SIDECAR_IDEMPOTENCY_REQUIRED?\n`,
    );
  });

  it('a listen host that does not resolve: exit 2 naming the setting, not a fatal getaddrinfo error', async () => {
    const keys = await makeKeys();
    const result = serve({
      ...validEnv(keys),
      SIDECAR_LISTEN_HOST: 'sidecar.invalid',
      SIDECAR_LISTEN_ALLOW_NON_LOOPBACK: 'true',
    });
    assert.equal(result.status, 2, result.stderr);
    assert.match(
      result.stderr,
      /^signing-sidecar: configuration error: SIDECAR_LISTEN_HOST \(listen\.host\): cannot resolve "sidecar\.invalid" \(E\w+\)\n$/,
    );
  });

  it('a listen host that is not an address of this host: exit 2 naming the setting', async () => {
    const keys = await makeKeys();
    // 192.0.2.0/24 is TEST-NET-1 (RFC 5737): never configured on a real interface.
    const result = serve({
      ...validEnv(keys),
      SIDECAR_LISTEN_HOST: '192.0.2.1',
      SIDECAR_LISTEN_ALLOW_NON_LOOPBACK: '1',
    });
    assert.equal(result.status, 2, result.stderr);
    assert.equal(
      result.stderr,
      `${CONFIG_ERROR}SIDECAR_LISTEN_HOST (listen.host): cannot listen on "192.0.2.1" (EADDRNOTAVAIL)\n`,
    );
  });
});

describe('signing-sidecar serve with the postback receiver in production', () => {
  it('without a forward secret nor signing turned off: exit 2, one line naming the setting', async () => {
    const keys = await makeKeys();
    const result = serve({
      ...validEnv(keys),
      SIDECAR_POSTBACK_FORWARD_URL: 'http://127.0.0.1:3000/gateway/postbacks',
      SIDECAR_POSTBACK_PUBLIC_URL: 'https://pay.example.com/gateway/postbacks',
      SIDECAR_POSTBACK_PUBLIC_KEY_FILE: keys.publicKeyFile,
      SIDECAR_POSTBACK_LISTEN_PORT: '0',
    });
    assert.equal(result.status, 2, result.stderr);
    assert.equal(result.stdout, '');
    assert.match(
      result.stderr,
      /^signing-sidecar: configuration error: SIDECAR_POSTBACK_FORWARD_SECRET_FILE \(postback\.forwardSecretFile\): is required in production, .*SIDECAR_POSTBACK_FORWARD_SIGNING \(postback\.forwardSigning\)=off delivers them unsigned\n$/,
    );
  });
});

describe('signing-sidecar serve on a non-loopback host', () => {
  it('starts only when allowed, and then logs a warning naming the setting', async () => {
    const keys = await makeKeys();
    const child = spawn(process.execPath, ['--import', 'tsx', MAIN, 'serve'], {
      env: {
        PATH: process.env.PATH,
        ...validEnv(keys),
        SIDECAR_LISTEN_HOST: '0.0.0.0',
        SIDECAR_LISTEN_ALLOW_NON_LOOPBACK: 'true',
        SIDECAR_LOG_LEVEL: 'info',
      },
    });
    let stdout = '';
    child.stdout.setEncoding('utf8');
    const started = new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`no start line in 15 s:\n${stdout}`)), 15_000);
      child.stdout.on('data', (chunk: string) => {
        stdout += chunk;
        if (stdout.includes('"event":"start"')) {
          clearTimeout(timer);
          resolve();
        }
      });
    });
    const exited = once(child, 'exit');
    try {
      await started;
    } finally {
      child.kill('SIGTERM');
      await exited;
    }
    const lines = stdout
      .split('\n')
      .filter((line) => line !== '')
      .map((line) => JSON.parse(line) as Record<string, unknown>);
    const warning = lines.find((line) => line.event === 'config.warning');
    assert.ok(warning, stdout);
    assert.equal(warning.level, 40, 'warn level');
    assert.equal(warning.setting, 'SIDECAR_LISTEN_HOST (listen.host)');
    assert.match(String(warning.msg), /"0\.0\.0\.0" is not loopback .*no authentication/);
    const start = lines.find((line) => line.event === 'start');
    assert.match(String(start?.proxyUrl), /^http:\/\/0\.0\.0\.0:\d+$/);
  });
});
