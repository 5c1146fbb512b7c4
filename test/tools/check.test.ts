import assert from 'node:assert/strict';
import { generateKeyPairSync } from 'node:crypto';
import { chmod, writeFile } from 'node:fs/promises';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { check } from '../../src/cli/check.js';
import { startSimulator, type RunningSimulator } from '@signing-sidecar/simulator';
import { vectorPrivateKeyPem, vectorPublicKeyPem } from '../support/vectors.js';
import { ECHOED_PASSWORD, EchoingGateway } from '../support/echoing-gateway.js';
import { runCommand, tempDir } from './run-command.js';
import { freeStablePort } from '../support/free-port.js';
import { SIDECAR_ACL_RULES, startRedis, type TestRedis } from '../support/redis-server.js';

const USERNAME = 'vendor@example.com';
const PASSWORD = 'correct horse battery staple';
const KEY_BODY_LINE = vectorPrivateKeyPem.split('\n')[1]!;

/** Output must never carry the password or private key material (the issue's "never prints secrets"). */
function assertNoSecrets(text: string): void {
  assert.ok(!text.includes(PASSWORD), 'password printed');
  assert.ok(!text.includes(KEY_BODY_LINE) && !text.includes('PRIVATE KEY-----'), 'key material printed');
  assert.ok(!/access_token"|refresh_token"/.test(text), 'token body printed');
}

const ACCOUNTS = [{ username: USERNAME, password: PASSWORD, publicKeyPem: vectorPublicKeyPem }];

/** Writes the account's private key and password files into `dir`. */
async function writeCredentials(dir: string): Promise<void> {
  await writeFile(join(dir, 'key.pem'), vectorPrivateKeyPem, { mode: 0o600 });
  await writeFile(join(dir, 'password'), `${PASSWORD}\n`, { mode: 0o600 });
}

/** The settings that point check at `baseUrl` as the test account, with the files writeCredentials wrote. */
const accountEnv = (baseUrl: string, dir: string): NodeJS.ProcessEnv => ({
  SIDECAR_BASE_URL: baseUrl,
  SIDECAR_ENVIRONMENT: 'staging',
  SIDECAR_USERNAME: USERNAME,
  SIDECAR_PASSWORD_FILE: join(dir, 'password'),
  SIDECAR_PRIVATE_KEY_FILE: join(dir, 'key.pem'),
});

describe('check against the simulator', () => {
  let sim: RunningSimulator;
  let tlsSim: RunningSimulator;
  let dir: string;
  let cleanup: () => Promise<void>;
  let env: NodeJS.ProcessEnv;

  before(async () => {
    ({ dir, cleanup } = await tempDir());
    [sim, tlsSim] = await Promise.all([
      startSimulator({ accounts: ACCOUNTS }),
      startSimulator({ accounts: ACCOUNTS, tls: true }),
    ]);
    await writeCredentials(dir);
    await writeFile(join(dir, 'wrong-password'), 'not the password', { mode: 0o600 });
    await writeFile(join(dir, 'ca.pem'), tlsSim.caPem ?? '');
    const small = generateKeyPairSync('rsa', { modulusLength: 1024 });
    await writeFile(join(dir, 'small.pem'), small.privateKey.export({ type: 'pkcs8', format: 'pem' }), { mode: 0o600 });
    env = {
      ...accountEnv(sim.baseUrl, dir),
      SIDECAR_UPSTREAM_CONNECT_TIMEOUT_MS: '2000',
    };
  });
  after(async () => {
    await Promise.all([sim.close(), tlsSim.close()]);
    await cleanup();
  });

  it('passes over http loopback: every line ✔, TLS not applicable, and it says what was not checked', async () => {
    sim.clock.setOffset(0);
    const run = await runCommand(check, [], env);
    assert.equal(run.code, 0, run.stdout);
    assert.match(run.stdout, /^✔ config: valid \(staging/m);
    assert.match(
      run.stdout,
      /^✔ private key: RSA 2048 bits, public key fingerprint a2c17aeb611726079e4a3b1d781d30327740bbedb7f4fb27dc386af342291cc3$/m,
    );
    assert.match(run.stdout, /^✔ key file permissions: .* mode 0600/m);
    assert.match(run.stdout, /^✔ base URL reachable: .*TLS not applicable/m);
    assert.match(run.stdout, /^✔ password login: as vendor@example\.com: access token issued, valid until \d{4}-/m);
    assert.match(run.stdout, /^✔ clock skew: this clock is \d+\.\d s/m);
    assert.match(run.stdout, /^- not checked: a signed request/m);
    assertNoSecrets(run.stdout + run.stderr);
  });

  it('passes over TLS when SIDECAR_UPSTREAM_CA_FILE trusts the simulator CA', async () => {
    const run = await runCommand(check, [], {
      ...env,
      SIDECAR_BASE_URL: tlsSim.baseUrl,
      SIDECAR_UPSTREAM_CA_FILE: join(dir, 'ca.pem'),
    });
    assert.equal(run.code, 0, run.stdout);
    assert.match(run.stdout, /^✔ base URL reachable: https:\/\/127\.0\.0\.1:\d+: TCP and TLS ok \(TLSv1\.[23]/m);
    assert.match(run.stdout, /^✔ password login/m);
  });

  it('fails over TLS without the CA, and points at SIDECAR_UPSTREAM_CA_FILE', async () => {
    const run = await runCommand(check, [], { ...env, SIDECAR_BASE_URL: tlsSim.baseUrl });
    assert.equal(run.code, 1);
    assert.match(
      run.stdout,
      /^✘ base URL reachable: .*TLS handshake failed: \w+ \(trust the gateway CA with SIDECAR_UPSTREAM_CA_FILE\)/m,
    );
    assert.match(run.stdout, /^- not checked: password login and clock skew/m);
  });

  it('a wrong password fails the login line with the gateway status and code, never the password', async () => {
    const run = await runCommand(check, [], { ...env, SIDECAR_PASSWORD_FILE: join(dir, 'wrong-password') });
    assert.equal(run.code, 1);
    assert.match(run.stdout, /^✘ password login: as vendor@example\.com: HTTP 401, code FAILED/m);
    assert.ok(!run.stdout.includes('not the password'));
    assertNoSecrets(run.stdout);
  });

  it('a gateway that echoes the request: its code and message shown with the password masked', async () => {
    const gateway = await new EchoingGateway(0).start();
    try {
      await writeFile(join(dir, 'echoed-password'), ECHOED_PASSWORD, { mode: 0o600 });
      const run = await runCommand(check, [], {
        ...env,
        SIDECAR_BASE_URL: gateway.url,
        SIDECAR_PASSWORD_FILE: join(dir, 'echoed-password'),
      });
      assert.equal(run.code, 1);
      const login = run.stdout.split('\n').find((line) => line.startsWith('✘ password login: '));
      assert.match(
        login ?? '',
        /HTTP 401, code FAILED \[redacted\] in \{.*, "grant refused for \[redacted\]; you sent /,
      );
      for (const form of [ECHOED_PASSWORD, JSON.stringify(ECHOED_PASSWORD).slice(1, -1)]) {
        assert.ok(!(run.stdout + run.stderr).includes(form), 'the password is printed');
      }
    } finally {
      await gateway.stop();
    }
  });

  it('fails when this clock is more than 60 s behind the gateway (its timestamps would be expired)', async () => {
    sim.clock.setOffset(90);
    try {
      const run = await runCommand(check, [], env);
      assert.equal(run.code, 1);
      const match =
        /^✘ clock skew: this clock is (\d+\.\d) s .* BEHIND the gateway.*signature\.timestamp\.expired/m.exec(
          run.stdout,
        );
      assert.ok(match, run.stdout);
      assert.ok(Math.abs(Number(match[1]) - 90) <= 1.5, `measured ${match[1]} s for a 90 s shift`);
    } finally {
      sim.clock.setOffset(0);
    }
  });

  it('fails when this clock is more than 5 s ahead of the gateway (its timestamps would be in the future)', async () => {
    sim.clock.setOffset(-10);
    try {
      const run = await runCommand(check, [], env);
      assert.equal(run.code, 1);
      assert.match(
        run.stdout,
        /^✘ clock skew: this clock is \d+\.\d s .* AHEAD of the gateway.*signature\.timestamp\.future/m,
      );
    } finally {
      sim.clock.setOffset(0);
    }
  });

  it('warns, without failing, beyond half the window (40 s behind)', async () => {
    sim.clock.setOffset(40);
    try {
      const run = await runCommand(check, [], env);
      assert.equal(run.code, 0, run.stdout);
      assert.match(run.stdout, /^! clock skew: this clock is \d+\.\d s .* behind the gateway \(limit 60 s\)/m);
    } finally {
      sim.clock.setOffset(0);
    }
  });

  it('reads the money limits file as serve does: its rules counted, the memory store warned, a bad file failed', async () => {
    const good = join(dir, 'limits.yaml');
    await writeFile(
      good,
      'rules:\n  - { name: w, route: /api/v2/transfer-out/init, maxPerMinute: 5 }\n' +
        '  - { name: d, route: /api/v2/transaction/init, maxAmount: "10.00", mode: report }\n',
    );
    const run = await runCommand(check, [], { ...env, SIDECAR_LIMITS_FILE: good });
    assert.equal(run.code, 0, run.stdout);
    assert.match(run.stdout, /^✔ limits: 1 enforced and 1 report-mode rules in .*limits\.yaml$/m);
    assert.match(run.stdout, /^! limits: the memory store counts each replica alone/m);
    const bad = join(dir, 'bad-limits.yaml');
    await writeFile(bad, 'rules:\n  - { name: w, route: /api/v2/transfer-out/init, maxAmount: 10.5 }\n');
    const refused = await runCommand(check, [], { ...env, SIDECAR_LIMITS_FILE: bad });
    assert.equal(refused.code, 1, refused.stdout);
    assert.match(refused.stdout, /^✘ limits: SIDECAR_LIMITS_FILE.*rule "w": maxAmount: a decimal in quotes/m);
  });

  it('warns when the key file is group/world readable', async () => {
    const loose = join(dir, 'loose.pem');
    await writeFile(loose, vectorPrivateKeyPem);
    await chmod(loose, 0o644);
    const run = await runCommand(check, [], { ...env, SIDECAR_PRIVATE_KEY_FILE: loose });
    assert.equal(run.code, 0, run.stdout);
    assert.match(
      run.stdout,
      /^! key file permissions: .*loose\.pem has mode 0644: group\/others can access it; run chmod 600/m,
    );
    // serve's start warning for the same file (a config warning) is not printed a second time as a config line.
    assert.equal(run.stdout.match(/has mode 0644/g)?.length, 1, run.stdout);
    assert.doesNotMatch(run.stdout, /^! config: SIDECAR_PRIVATE_KEY_FILE/m);
  });

  describe('the PKCS#11 PIN file, judged as the key file is', () => {
    // No module at this path: the token line fails whether pkcs11js is built or not; the PIN file's line does not
    // depend on the token (test/e2e/pkcs11-signer.test.ts runs check against a real SoftHSM2).
    const PIN = 'pin-never-printed';
    const pkcs11Env = (pinFile: string): NodeJS.ProcessEnv => ({
      ...env,
      SIDECAR_PRIVATE_KEY_FILE: undefined,
      SIDECAR_SIGNER: 'pkcs11',
      SIDECAR_PKCS11_MODULE: join(dir, 'no-such-module.so'),
      SIDECAR_PKCS11_TOKEN_LABEL: 'payments',
      SIDECAR_PKCS11_KEY_LABEL: 'gateway',
      SIDECAR_PKCS11_PIN_FILE: pinFile,
    });

    it('warns when the PIN file is group/world readable', async () => {
      const loose = join(dir, 'loose-pin');
      await writeFile(loose, `${PIN}\n`);
      await chmod(loose, 0o644);
      const run = await runCommand(check, [], pkcs11Env(loose));
      assert.match(run.stdout, /^✔ config: valid/m);
      assert.match(
        run.stdout,
        /^! PIN file permissions: .*loose-pin has mode 0644: group\/others can access it; run chmod 600/m,
      );
      assert.equal(run.stdout.match(/has mode 0644/g)?.length, 1, run.stdout);
      assert.doesNotMatch(run.stdout, /^! config: SIDECAR_PKCS11_PIN_FILE/m);
      assert.ok(!run.stdout.includes(PIN), 'PIN printed');
    });

    it('passes an owner-only (0600) PIN file', async () => {
      const tight = join(dir, 'tight-pin');
      await writeFile(tight, `${PIN}\n`);
      await chmod(tight, 0o600);
      const run = await runCommand(check, [], pkcs11Env(tight));
      assert.match(run.stdout, /^✔ config: valid/m);
      assert.match(run.stdout, /^✔ PIN file permissions: .*tight-pin has mode 0600 \(owner only\)$/m);
    });
  });

  it('fails on a 1024-bit key, naming the setting, and checks nothing further', async () => {
    const run = await runCommand(check, [], { ...env, SIDECAR_PRIVATE_KEY_FILE: join(dir, 'small.pem') });
    assert.equal(run.code, 1);
    assert.match(run.stdout, /^✘ config: SIDECAR_PRIVATE_KEY_FILE.*key is 1024 bits; at least 2048 are required/m);
    assert.doesNotMatch(run.stdout, /password login/);
    assertNoSecrets(run.stdout);
  });

  it('fails on a missing setting, naming it', async () => {
    const run = await runCommand(check, [], { ...env, SIDECAR_BASE_URL: '' });
    assert.equal(run.code, 1);
    assert.match(run.stdout, /^✘ config: SIDECAR_BASE_URL.* is required/m);
  });

  it('fails on a misspelled setting, naming the one meant, and checks nothing further', async () => {
    const run = await runCommand(check, [], { ...env, SIDECAR_IDEMPOTENCY_REQUIERD: 'true' });
    assert.equal(run.code, 1);
    assert.match(
      run.stdout,
      /^✘ config: SIDECAR_IDEMPOTENCY_REQUIERD: is not a setting; did you mean SIDECAR_IDEMPOTENCY_REQUIRED\?$/m,
    );
    assert.doesNotMatch(run.stdout, /password login/);
  });

  it('reports every refused setting at once, one ✘ line each, and checks nothing further', async () => {
    const run = await runCommand(check, [], {
      ...env,
      SIDECAR_BASE_URL: '',
      SIDECAR_QUIT_ENDPOINT: 'off',
      SIDECAR_SIGNED_ROUTES: ',',
      SIDECAR_PASSWORD: 'also-inline',
      SIDECAR_LISTEN_HOST: '0.0.0.0',
    });
    assert.equal(run.code, 1);
    const refused = run.stdout.split('\n').filter((line) => line.startsWith('✘ config: '));
    assert.equal(refused.length, 5, run.stdout);
    for (const setting of [
      'SIDECAR_BASE_URL',
      'SIDECAR_QUIT_ENDPOINT',
      'SIDECAR_SIGNED_ROUTES',
      'SIDECAR_PASSWORD_FILE',
      'SIDECAR_LISTEN_HOST',
    ]) {
      assert.ok(
        refused.some((line) => line.startsWith(`✘ config: ${setting} `)),
        `${setting} in\n${run.stdout}`,
      );
    }
    assert.match(run.stdout, /^- not checked: key, connection, login and clock: fix the config first$/m);
    assert.doesNotMatch(run.stdout, /password login/);
    assert.ok(!run.stdout.includes('also-inline'));
  });

  it('a listen host that does not resolve is a config failure naming the setting', async () => {
    const run = await runCommand(check, [], {
      ...env,
      SIDECAR_LISTEN_HOST: 'sidecar.invalid',
      SIDECAR_LISTEN_ALLOW_NON_LOOPBACK: 'true',
    });
    assert.equal(run.code, 1);
    assert.match(run.stdout, /^✘ config: SIDECAR_LISTEN_HOST \(listen\.host\): cannot resolve "sidecar\.invalid"/m);
  });

  it('an allowed non-loopback listen host passes with a warning line', async () => {
    const run = await runCommand(check, [], {
      ...env,
      SIDECAR_LISTEN_HOST: '0.0.0.0',
      SIDECAR_LISTEN_ALLOW_NON_LOOPBACK: 'true',
    });
    assert.equal(run.code, 0, run.stdout);
    assert.match(run.stdout, /^✔ config: valid/m);
    assert.match(run.stdout, /^! config: SIDECAR_LISTEN_HOST \(listen\.host\): "0\.0\.0\.0" is not loopback/m);
  });

  it('fails when nothing listens at the base URL', async () => {
    const port = await freeStablePort();
    const run = await runCommand(check, [], { ...env, SIDECAR_BASE_URL: `http://127.0.0.1:${port}` });
    assert.equal(run.code, 1);
    assert.match(run.stdout, /^✘ base URL reachable: .*TCP connect failed: ECONNREFUSED/m);
  });

  it('the postback receiver: public URL, keys and sources shown, the forward URL probed (no postback sent)', async () => {
    await writeFile(join(dir, 'gateway-postback.pub.pem'), `${sim.postbackPublicKeyPem}\n${vectorPublicKeyPem}`);
    const internal = createServer((_req, res) => res.end('must not be called'));
    await new Promise<void>((resolve) => internal.listen(0, '127.0.0.1', resolve));
    const calls = { count: 0 };
    internal.on('request', () => calls.count++);
    const postbackEnv = {
      ...env,
      SIDECAR_POSTBACK_FORWARD_URL: `http://127.0.0.1:${(internal.address() as AddressInfo).port}/hooks`,
      SIDECAR_POSTBACK_PUBLIC_URL: 'https://Pay.Example.com/gateway/postbacks',
      SIDECAR_POSTBACK_PUBLIC_KEY_FILE: join(dir, 'gateway-postback.pub.pem'),
      SIDECAR_POSTBACK_LISTEN_PORT: '0',
    };
    try {
      const run = await runCommand(check, [], postbackEnv);
      assert.equal(run.code, 0, run.stdout);
      assert.match(
        run.stdout,
        /^✔ postback public URL: signed as https:\/\/pay\.example\.com\/gateway\/postbacks; serves POST \/gateway\/postbacks/m,
      );
      assert.match(run.stdout, /^✔ postback keys: 2 key\(s\): RSA 2048 bits, fingerprint [0-9a-f]{64}; RSA 2048 bits/m);
      assert.match(run.stdout, /^- postback sources: any .*unsigned postbacks refused/m);
      assert.match(run.stdout, /^✔ postback forward URL reachable: http:\/\/127\.0\.0\.1:\d+\/hooks: TCP ok/m);
      assert.equal(calls.count, 0, 'no postback was sent to the internal service');
      const port = await freeStablePort();
      const down = await runCommand(check, [], {
        ...postbackEnv,
        SIDECAR_POSTBACK_FORWARD_URL: `http://127.0.0.1:${port}/h`,
      });
      assert.equal(down.code, 1);
      assert.match(down.stdout, /^✘ postback forward URL reachable: .*TCP connect failed: ECONNREFUSED/m);
      const badKey = await runCommand(check, [], {
        ...postbackEnv,
        SIDECAR_POSTBACK_PUBLIC_KEY_FILE: join(dir, 'password'),
      });
      assert.equal(badKey.code, 1);
      assert.match(
        badKey.stdout,
        /^✘ config: SIDECAR_POSTBACK_PUBLIC_KEY_FILE \(postback\.publicKeyFile\): .*holds no PEM public key/m,
      );
      assertNoSecrets(run.stdout + down.stdout + badKey.stdout);
    } finally {
      internal.close();
    }
  });

  it('without SIDECAR_POSTBACK_FORWARD_URL the receiver is reported off', async () => {
    const run = await runCommand(check, [], env);
    assert.match(run.stdout, /^- postback receiver: off/m);
  });

  it('bad usage exits 2; --help exits 0 and warns that the login invalidates earlier tokens', async () => {
    assert.equal((await runCommand(check, ['--verbose'], env)).code, 2);
    const help = await runCommand(check, ['--help'], env);
    assert.equal(help.code, 0);
    assert.match(help.stdout, /invalidates access tokens issued before it/);
  });
});

describe('check with SIDECAR_STATE_STORE=redis (a real redis-server)', () => {
  let sim: RunningSimulator;
  let redis: TestRedis;
  let dir: string;
  let cleanup: () => Promise<void>;
  let env: NodeJS.ProcessEnv;

  before(async () => {
    ({ dir, cleanup } = await tempDir());
    [sim, redis] = await Promise.all([startSimulator({ accounts: ACCOUNTS }), startRedis({ user: true })]);
    await writeCredentials(dir);
    await writeFile(join(dir, 'wrong-redis-password'), 'not-the-redis-password\n', { mode: 0o600 });
    env = {
      ...accountEnv(sim.baseUrl, dir),
      SIDECAR_STATE_STORE: 'redis',
      SIDECAR_REDIS_URL: redis.url,
      SIDECAR_REDIS_USERNAME: redis.username,
      SIDECAR_REDIS_PASSWORD_FILE: redis.passwordFile,
    };
  });
  after(async () => {
    await Promise.all([sim.close(), redis.close()]);
    await cleanup();
  });

  it('connects as the ACL user, PINGs within the command timeout and reads a key under the prefix', async () => {
    const run = await runCommand(check, [], env);
    assert.equal(run.code, 0, run.stdout);
    assert.match(
      run.stdout,
      /^✔ state store: redis redis:\/\/127\.0\.0\.1:\d+ as signing-sidecar: primary 127\.0\.0\.1:\d+, 0 replicas; PING answered in \d+\.\d ms \(timeout 100 ms\), keys under signing-sidecar: readable$/m,
    );
    assert.ok(!(run.stdout + run.stderr).includes(redis.password!), 'the Redis password is never printed');
    assertNoSecrets(run.stdout + run.stderr);
  });

  it('warns when the Redis user may not run PTTL (an ACL from before it was needed)', async () => {
    const older = await startRedis({ user: true, acl: SIDECAR_ACL_RULES.filter((rule) => rule !== '+pttl') });
    try {
      const run = await runCommand(check, [], {
        ...env,
        SIDECAR_REDIS_URL: older.url,
        SIDECAR_REDIS_PASSWORD_FILE: older.passwordFile,
      });
      assert.match(run.stdout, /^! state store: redis .*: the Redis user may not run PTTL; add \+pttl/m);
      assert.match(run.stdout, /^✔ state store: redis /m, 'the store itself still works');
    } finally {
      await older.close();
    }
  });

  it('fails naming the cause when the password is wrong, never printing it', async () => {
    const run = await runCommand(check, [], { ...env, SIDECAR_REDIS_PASSWORD_FILE: join(dir, 'wrong-redis-password') });
    assert.equal(run.code, 1);
    assert.match(run.stdout, /^✘ state store: redis redis:\/\/127\.0\.0\.1:\d+ as signing-sidecar: .*WRONGPASS/m);
    assert.ok(!(run.stdout + run.stderr).includes('not-the-redis-password'));
    assert.match(run.stdout, /^result: FAILED$/m);
  });

  it('fails when nothing listens at SIDECAR_REDIS_URL', async () => {
    const port = await freeStablePort();
    const run = await runCommand(check, [], { ...env, SIDECAR_REDIS_URL: `redis://127.0.0.1:${port}` });
    assert.equal(run.code, 1);
    assert.match(run.stdout, /^✘ state store: redis redis:\/\/127\.0\.0\.1:\d+ as signing-sidecar: .*ECONNREFUSED/m);
  });

  it('SIDECAR_REDIS_MIN_REPLICAS_ACKED=1 on a Redis without replicas: refused, naming the topology it found', async () => {
    const run = await runCommand(check, [], { ...env, SIDECAR_REDIS_MIN_REPLICAS_ACKED: '1' });
    assert.equal(run.code, 1);
    assert.match(
      run.stdout,
      /^✘ state store: redis .*: primary 127\.0\.0\.1:\d+, 0 replicas; SIDECAR_REDIS_MIN_REPLICAS_ACKED is 1 but the primary has 0/m,
    );
  });

  it('the memory budget is reported: its limit, where it was read, its shares and where shedding starts', async () => {
    const run = await runCommand(check, [], { ...env, SIDECAR_MEMORY_LIMIT_MB: '256' });
    assert.match(
      run.stdout,
      /^✔ memory: limit 256 MiB \(setting\): store 72, bodies 36, headroom 38, runtime 72; sheds at 230 MiB$/m,
    );
    const refused = await runCommand(check, [], { ...env, SIDECAR_MEMORY_LIMIT_MB: '96' });
    assert.match(refused.stdout, /^✘ config: SIDECAR_MEMORY_LIMIT_MB \(memoryLimitMb\): the memory limit \(96 MiB/m);
    assert.equal(refused.code, 1);
  });

  it('the memory store is reported, not checked', async () => {
    const run = await runCommand(check, [], { ...env, SIDECAR_STATE_STORE: 'memory' });
    assert.match(run.stdout, /^- state store: memory \(this pod only/m);
  });
});
