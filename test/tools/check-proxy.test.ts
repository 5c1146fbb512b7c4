// `check` with a forward proxy (a real Squid): the tunnel on a line of its own, so that a proxy refusal (407, 403,
// 503) is never read as a gateway failure, and a gateway failure through an open tunnel is named as such.
import assert from 'node:assert/strict';
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { check } from '../../src/cli/check.js';
import { startSimulator, type RunningSimulator } from '@signing-sidecar/simulator';
import { freeStablePort } from '../support/free-port.js';
import { startSquid, type TestSquid } from '../support/squid.js';
import { vectorPrivateKeyPem, vectorPublicKeyPem } from '../support/vectors.js';
import { runCommand, tempDir } from './run-command.js';

const USERNAME = 'vendor@example.com';
const PASSWORD = 'correct horse battery staple';

describe('check through a forward proxy', () => {
  let sim: RunningSimulator;
  let squid: TestSquid;
  let dir: string;
  let cleanup: () => Promise<void>;
  let env: NodeJS.ProcessEnv;

  before(async () => {
    ({ dir, cleanup } = await tempDir());
    sim = await startSimulator({
      accounts: [{ username: USERNAME, password: PASSWORD, publicKeyPem: vectorPublicKeyPem }],
      tls: true,
    });
    squid = await startSquid({ gatewayPort: sim.port, auth: true });
    await writeFile(join(dir, 'key.pem'), vectorPrivateKeyPem, { mode: 0o600 });
    await writeFile(join(dir, 'password'), `${PASSWORD}\n`, { mode: 0o600 });
    await writeFile(join(dir, 'proxy-password'), `${squid.password!}\n`, { mode: 0o600 });
    await writeFile(join(dir, 'wrong-proxy-password'), 'not-the-proxy-password\n', { mode: 0o600 });
    await writeFile(join(dir, 'ca.pem'), sim.caPem!);
    env = {
      SIDECAR_BASE_URL: sim.baseUrl,
      SIDECAR_ENVIRONMENT: 'staging',
      SIDECAR_USERNAME: USERNAME,
      SIDECAR_PASSWORD_FILE: join(dir, 'password'),
      SIDECAR_PRIVATE_KEY_FILE: join(dir, 'key.pem'),
      SIDECAR_UPSTREAM_CA_FILE: join(dir, 'ca.pem'),
      SIDECAR_UPSTREAM_CONNECT_TIMEOUT_MS: '2000',
      SIDECAR_UPSTREAM_PROXY_URL: squid.url,
      SIDECAR_UPSTREAM_PROXY_USERNAME: squid.username,
      SIDECAR_UPSTREAM_PROXY_PASSWORD_FILE: join(dir, 'proxy-password'),
    };
  });
  after(async () => {
    await squid?.close();
    await sim?.close();
    await cleanup?.();
  });

  const assertNoProxySecret = (text: string): void => {
    assert.ok(!text.includes(squid.password!), 'the proxy password is never printed');
    assert.ok(!text.includes(PASSWORD), 'the account password is never printed');
  };

  it('passes: the tunnel, then TLS to the gateway through it, the login and the clock', async () => {
    const run = await runCommand(check, [], env);
    assert.equal(run.code, 0, run.stdout);
    assert.match(run.stdout, /^✔ forward proxy: CONNECT 127\.0\.0\.1:\d+ via http:\/\/127\.0\.0\.1:\d+: tunnel open$/m);
    assert.match(run.stdout, /^✔ base URL reachable: https:\/\/127\.0\.0\.1:\d+: TCP and TLS ok/m);
    assert.match(run.stdout, /^✔ password login/m);
    assertNoProxySecret(run.stdout + run.stderr);
  });

  it('a wrong proxy password: the proxy line names the 407, the gateway is not judged', async () => {
    const run = await runCommand(check, [], {
      ...env,
      SIDECAR_UPSTREAM_PROXY_PASSWORD_FILE: join(dir, 'wrong-proxy-password'),
    });
    assert.equal(run.code, 1, run.stdout);
    assert.match(
      run.stdout,
      /^✘ forward proxy: .*refused it, 407 authentication required \(check SIDECAR_UPSTREAM_PROXY_USERNAME/m,
    );
    assert.match(
      run.stdout,
      /^- not checked: base URL, password login and clock skew: no tunnel through the forward proxy$/m,
    );
    assert.doesNotMatch(run.stdout, /base URL reachable/);
    assert.ok(!run.stdout.includes('not-the-proxy-password'));
    assertNoProxySecret(run.stdout + run.stderr);
  });

  it('a CONNECT the rules forbid: 403', async () => {
    const other = await startSquid({ gatewayPort: sim.port + 1 });
    try {
      const run = await runCommand(check, [], {
        ...env,
        SIDECAR_UPSTREAM_PROXY_URL: other.url,
        SIDECAR_UPSTREAM_PROXY_USERNAME: '',
        SIDECAR_UPSTREAM_PROXY_PASSWORD_FILE: '',
      });
      assert.equal(run.code, 1, run.stdout);
      assert.match(run.stdout, /^✘ forward proxy: .*refused it, 403 forbidden/m);
    } finally {
      await other.close();
    }
  });

  it('a proxy that cannot reach the gateway answers the CONNECT with 5xx: named as the proxy hop', async () => {
    const nothing = await freeStablePort();
    const other = await startSquid({ gatewayPort: nothing });
    try {
      const run = await runCommand(check, [], {
        ...env,
        SIDECAR_BASE_URL: `https://127.0.0.1:${nothing}`,
        SIDECAR_UPSTREAM_PROXY_URL: other.url,
        SIDECAR_UPSTREAM_PROXY_USERNAME: '',
        SIDECAR_UPSTREAM_PROXY_PASSWORD_FILE: '',
      });
      assert.equal(run.code, 1, run.stdout);
      assert.match(
        run.stdout,
        /^✘ forward proxy: .*refused it, 5\d\d \(the forward proxy could not reach the gateway/m,
      );
    } finally {
      await other.close();
    }
  });

  it('no proxy listening: ERR_PROXY_UNREACHABLE on the proxy line', async () => {
    const run = await runCommand(check, [], {
      ...env,
      SIDECAR_UPSTREAM_PROXY_URL: `http://127.0.0.1:${await freeStablePort()}`,
    });
    assert.equal(run.code, 1, run.stdout);
    assert.match(run.stdout, /^✘ forward proxy: .*ERR_PROXY_UNREACHABLE/m);
  });

  it("the tunnel opens but the gateway's certificate is not trusted: the gateway line fails, not the proxy's", async () => {
    const run = await runCommand(check, [], { ...env, SIDECAR_UPSTREAM_CA_FILE: '' });
    assert.equal(run.code, 1, run.stdout);
    assert.match(run.stdout, /^✔ forward proxy: .*tunnel open$/m);
    assert.match(
      run.stdout,
      /^✘ base URL reachable: .*TLS handshake through the tunnel failed: .*SIDECAR_UPSTREAM_CA_FILE/m,
    );
  });
});
