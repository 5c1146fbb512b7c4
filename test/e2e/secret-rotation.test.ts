// Secret rotation: the secret files change under a running sidecar with traffic flowing. The simulator holds
// the vendor's side of a key rotation (the old and the new public key, then the new one only), so a request
// signed with the wrong key is a failed request here.
import assert from 'node:assert/strict';
import { mkdir, readFile, rename, rm, symlink, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import { generate } from 'selfsigned';
import { publicKeyFingerprint } from '../../src/signing/keys.js';
import { parsePrivateKey } from '../../src/config/private-key.js';
import { startSimulator, type RunningSimulator } from '@signing-sidecar/simulator';
import { makeKeys, type TestKeys } from '../support/keys.js';
import { RecordingGateway, TEST_PASSWORD, TEST_USERNAME } from '../support/recording-gateway.js';
import { scratchDir } from '../support/scratch.js';
import { spawnSidecar } from '../support/spawned-sidecar.js';
import { startSidecar } from '../../src/app.js';
import { loadConfig } from '../../src/config/load.js';
import { CapturedOutput, sidecarEnv, startTestSidecar, waitUntilReady, type TestSidecar } from '../support/sidecar.js';
import { deposit, postJson } from '../support/sim-world.js';

const POLL_MS = 250;
const POLL_ENV = { SIDECAR_SECRET_POLL_INTERVAL_MS: String(POLL_MS) };

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

function fingerprintOf(keys: TestKeys): string {
  return publicKeyFingerprint(parsePrivateKey(keys.privateKeyPem));
}

/** Replaces a file the way editors and `kubectl cp` do: a new file renamed over the old one. */
async function replaceFile(path: string, content: string): Promise<void> {
  await writeFile(`${path}.tmp`, content, { mode: 0o600 });
  await rename(`${path}.tmp`, path);
}

async function metricsText(running: TestSidecar): Promise<string> {
  return running.sidecar.metrics.registry.metrics();
}

function reloads(text: string, setting: string, outcome: string): number {
  const line = text
    .split('\n')
    .find((l) => l.startsWith(`signing_sidecar_config_reloads_total{setting="${setting}",outcome="${outcome}"}`));
  return line === undefined ? Number.NaN : Number(line.split(' ').at(-1));
}

/** The key_fingerprint labels of build_info: exactly one, the key in use. */
function fingerprints(text: string): string[] {
  return [...text.matchAll(/^signing_sidecar_build_info\{.*key_fingerprint="([0-9a-f]+)".*\} 1$/gm)].map((m) => m[1]!);
}

async function waitFor(what: string, check: () => Promise<boolean> | boolean, ms = 3_000): Promise<number> {
  const started = Date.now();
  while (!(await check())) {
    if (Date.now() - started > ms) throw new Error(`timed out waiting for ${what}`);
    await sleep(20);
  }
  return Date.now() - started;
}

/** Deposits sent back to back by a few clients until stopped; every status is kept. */
function traffic(proxyUrl: string, clients = 4): { stop(): Promise<Array<{ status: number; body: string }>> } {
  let running = true;
  const answers: Array<{ status: number; body: string }> = [];
  const loops = Array.from({ length: clients }, async () => {
    while (running) {
      const answer = await postJson(proxyUrl, deposit());
      answers.push({ status: answer.status, body: answer.body });
    }
  });
  return {
    async stop() {
      running = false;
      await Promise.all(loops);
      return answers;
    },
  };
}

function assertAllSucceeded(answers: ReadonlyArray<{ status: number; body: string }>, what: string): void {
  assert.ok(answers.length > 0, `${what}: some traffic flowed`);
  const failed = answers.filter((a) => a.status >= 300);
  assert.deepEqual(failed, [], `${what}: ${failed.length} of ${answers.length} requests failed`);
}

interface KeyWorld {
  readonly oldKeys: TestKeys;
  readonly newKeys: TestKeys;
  readonly simulator: RunningSimulator;
  readonly running: TestSidecar;
  stop(): Promise<void>;
}

/** The simulator knows the old key only (as before a rotation); the sidecar signs with it, from `keyFile`. */
async function startKeyWorld(configure?: (oldKeys: TestKeys) => Promise<NodeJS.ProcessEnv>): Promise<KeyWorld> {
  const [oldKeys, newKeys] = await Promise.all([makeKeys(), makeKeys()]);
  const simulator = await startSimulator({
    accounts: [{ username: TEST_USERNAME, password: TEST_PASSWORD, publicKeyPem: oldKeys.publicKeyPem }],
  });
  const extra = configure ? await configure(oldKeys) : {};
  const running = await startTestSidecar(await sidecarEnv(oldKeys, simulator.baseUrl, { ...POLL_ENV, ...extra }));
  await waitUntilReady(running.sidecar);
  return {
    oldKeys,
    newKeys,
    simulator,
    running,
    async stop() {
      await running.stop();
      await simulator.close();
    },
  };
}

/**
 * The vendor's rotation around a file swap: both public keys accepted while the sidecar switches, the fingerprint
 * gauge changes within two seconds, then the old public key is withdrawn and traffic still succeeds.
 */
async function rotateUnderTraffic(world: KeyWorld, swap: () => Promise<void>): Promise<number> {
  const { simulator, running, oldKeys, newKeys } = world;
  simulator.setPublicKeys(TEST_USERNAME, [oldKeys.publicKeyPem, newKeys.publicKeyPem]);
  const load = traffic(running.sidecar.egressUrl);
  await sleep(200);
  await swap();
  const took = await waitFor('the new key fingerprint on build_info', async () => {
    const shown = fingerprints(await metricsText(running));
    return shown.length === 1 && shown[0] === fingerprintOf(newKeys);
  });
  assert.ok(took < 2_000, `the new key was in use after ${took} ms`);
  // Requests signed with the old key just before the swap are still on their way (they finish with the key they
  // started with); a vendor withdraws the old key long after. Let them land first.
  await sleep(500);
  // The vendor confirms and withdraws the old key: only the new one verifies from now on.
  simulator.setPublicKeys(TEST_USERNAME, [newKeys.publicKeyPem]);
  await sleep(300);
  assertAllSucceeded(await load.stop(), 'during and after the rotation');
  assertAllSucceeded([await postJson(running.sidecar.egressUrl, deposit())], 'verified with the new public key only');
  return took;
}

describe('secret rotation without a restart', () => {
  it('a key file replaced between loading the configuration and start: the first poll picks it up', async () => {
    const [oldKeys, newKeys] = await Promise.all([makeKeys(), makeKeys()]);
    const gateway = await new RecordingGateway().start();
    const config = loadConfig(await sidecarEnv(oldKeys, gateway.url, POLL_ENV));
    await replaceFile(oldKeys.privateKeyFile, newKeys.privateKeyPem);
    const logs = new CapturedOutput();
    const sidecar = await startSidecar(config, { logDestination: logs });
    const running: TestSidecar = { sidecar, logs, stop: () => sidecar.shutdown('test') };
    after(async () => {
      await running.stop();
      await gateway.stop();
    });
    await waitFor('the new key in use', async () => {
      const shown = fingerprints(await metricsText(running));
      return shown.length === 1 && shown[0] === fingerprintOf(newKeys);
    });
  });

  it('a replaced private key is used for the next signatures: 0 failed requests, the gauge and a log line show it', async () => {
    const world = await startKeyWorld();
    after(() => world.stop());
    const { running, oldKeys, newKeys } = world;
    const before = await metricsText(running);
    assert.deepEqual(fingerprints(before), [fingerprintOf(oldKeys)]);
    assert.equal(reloads(before, 'private_key', 'success'), 0, 'series created at zero');
    assert.equal(reloads(before, 'private_key', 'error'), 0);
    assert.equal(reloads(before, 'password', 'error'), 0);
    await rotateUnderTraffic(world, () => replaceFile(oldKeys.privateKeyFile, newKeys.privateKeyPem));
    const text = await metricsText(running);
    assert.equal(reloads(text, 'private_key', 'success'), 1);
    assert.equal(reloads(text, 'private_key', 'error'), 0);
    const line = running.logs.lines().find((l) => l.event === 'config.reload' && l.outcome === 'success');
    assert.equal(line?.keyFingerprint, fingerprintOf(newKeys));
    assert.match(String(line?.setting), /^SIDECAR_PRIVATE_KEY_FILE/);
    const start = running.logs.lines().find((l) => l.event === 'start');
    assert.equal(start?.keyFingerprint, fingerprintOf(oldKeys), 'the start line names the key it started with');
    assert.ok(!running.logs.text.includes('PRIVATE KEY'), 'no key material in the logs');
  });

  it('a half-written key file keeps the old key, is logged naming the setting and counted; the complete file then applies', async () => {
    const world = await startKeyWorld();
    after(() => world.stop());
    const { running, oldKeys, newKeys, simulator } = world;
    const half = newKeys.privateKeyPem.slice(0, Math.floor(newKeys.privateKeyPem.length / 2));
    // Written in place, as a copy that is still running would leave it.
    await writeFile(oldKeys.privateKeyFile, half);
    await waitFor(
      'the refusal to be counted',
      async () => reloads(await metricsText(running), 'private_key', 'error') === 1,
    );
    // The old key stays in use: the simulator, which knows only the old public key, accepts every request.
    const load = traffic(running.sidecar.egressUrl, 2);
    await sleep(4 * POLL_MS);
    assertAllSucceeded(await load.stop(), 'with the half-written file in place');
    const text = await metricsText(running);
    assert.equal(reloads(text, 'private_key', 'error'), 1, 'counted once, not at every poll');
    assert.equal(reloads(text, 'private_key', 'success'), 0);
    assert.deepEqual(fingerprints(text), [fingerprintOf(oldKeys)]);
    const refused = running.logs.lines().filter((l) => l.event === 'config.reload' && l.outcome === 'error');
    assert.equal(refused.length, 1);
    assert.equal(refused[0]?.level, 50, 'an error line');
    assert.match(String(refused[0]?.setting), /^SIDECAR_PRIVATE_KEY_FILE/);
    assert.ok(!running.logs.text.includes(half.slice(40, 80)), 'the content is never logged');
    // The rest of the file arrives: the new key applies.
    await rotateUnderTraffic(world, () => writeFile(oldKeys.privateKeyFile, newKeys.privateKeyPem));
    assert.equal(reloads(await metricsText(running), 'private_key', 'success'), 1);
    assert.ok(simulator.transactions().length > 0);
  });

  it('the Kubernetes ..data symlink swap, done as the kubelet does it, rotates the key and the password', async () => {
    const dir = scratchDir('sidecar-secret-volume-');
    const firstData = '..2024_01_01_00_00_00.000000001';
    const world = await startKeyWorld(async (oldKeys) => {
      await mkdir(join(dir, firstData));
      await writeFile(join(dir, firstData, 'key.pem'), oldKeys.privateKeyPem, { mode: 0o600 });
      await writeFile(join(dir, firstData, 'password'), `${TEST_PASSWORD}\n`, { mode: 0o600 });
      await symlink(firstData, join(dir, '..data'));
      await symlink('..data/key.pem', join(dir, 'key.pem'));
      await symlink('..data/password', join(dir, 'password'));
      return { SIDECAR_PRIVATE_KEY_FILE: join(dir, 'key.pem'), SIDECAR_PASSWORD_FILE: join(dir, 'password') };
    });
    after(() => world.stop());
    const { running, newKeys } = world;
    assert.equal(reloads(await metricsText(running), 'password', 'success'), 0);
    await rotateUnderTraffic(world, async () => {
      // The kubelet's AtomicWriter: a new timestamped folder, a `..data_tmp` symlink to it renamed over `..data`
      // (one atomic rename), then the old folder removed. The user-visible files are never written.
      const nextData = '..2024_06_01_00_00_00.000000002';
      await mkdir(join(dir, nextData));
      await writeFile(join(dir, nextData, 'key.pem'), newKeys.privateKeyPem, { mode: 0o600 });
      await writeFile(join(dir, nextData, 'password'), 'a rotated password\n', { mode: 0o600 });
      await symlink(nextData, join(dir, '..data_tmp'));
      await rename(join(dir, '..data_tmp'), join(dir, '..data'));
      await rm(join(dir, firstData), { recursive: true });
    });
    assert.equal(await readFile(join(dir, 'key.pem'), 'utf8'), newKeys.privateKeyPem);
    const text = await metricsText(running);
    assert.equal(reloads(text, 'private_key', 'success'), 1);
    assert.equal(reloads(text, 'password', 'success'), 1);
    assert.equal(reloads(text, 'password', 'error'), 0);
    assert.ok(!running.logs.text.includes('a rotated password'), 'the password is never logged');
  });

  it('a rotated password is not used for a login at once: the next login uses it', async () => {
    const keys = await makeKeys();
    const gateway = await new RecordingGateway().start();
    const running = await startTestSidecar(await sidecarEnv(keys, gateway.url, POLL_ENV));
    after(async () => {
      await running.stop();
      await gateway.stop();
    });
    await waitUntilReady(running.sidecar);
    const grants = gateway.grants.length;
    // sidecarEnv writes the password file next to the key.
    await replaceFile(join(keys.dir, 'password'), 'the next password\n');
    await waitFor('the password reload', async () => reloads(await metricsText(running), 'password', 'success') === 1);
    await sleep(3 * POLL_MS);
    assert.equal(gateway.grants.length, grants, 'no login because the password changed');
    const line = running.logs.lines().find((l) => l.event === 'config.reload' && l.outcome === 'success');
    assert.match(String(line?.setting), /^SIDECAR_PASSWORD_FILE/);
    // The gateway ends the session (both tokens refused): the sidecar logs in again, with the new password,
    // which this gateway does not know (it accepts only the first): the login is refused, so it was the new one.
    gateway.revokeRefreshTokens();
    gateway.revokeAccessToken(gateway.issuedAccessTokens.at(-1)!);
    await postJson(running.sidecar.egressUrl, deposit());
    await waitFor('the refused login', () => gateway.grants.at(-1)?.grant === 'password');
    await waitFor('the login counted', async () =>
      /token_requests_total\{grant="password",outcome="rejected"\} 1/.test(await metricsText(running)),
    );
    // The way back: the old password file again, and the next login (after its backoff) succeeds.
    await replaceFile(join(keys.dir, 'password'), `${TEST_PASSWORD}\n`);
    await waitUntilReady(running.sidecar, 10_000);
    assert.ok(!running.logs.text.includes('the next password'), 'the password is never logged');
  });

  it('SIGHUP (reload()) reads every file at once: a refused file is reported without waiting, unchanged ones are logged', async () => {
    const world = await startKeyWorld();
    after(() => world.stop());
    const { running, oldKeys } = world;
    const unchanged = await running.sidecar.reload();
    assert.deepEqual(
      unchanged.map((r) => [r.name, r.outcome]),
      [
        ['private_key', 'unchanged'],
        ['password', 'unchanged'],
      ],
    );
    await writeFile(oldKeys.privateKeyFile, 'not a key');
    const reports = await running.sidecar.reload();
    assert.deepEqual(
      reports.map((r) => [r.name, r.outcome]),
      [
        ['private_key', 'error'],
        ['password', 'unchanged'],
      ],
    );
    assert.equal(reloads(await metricsText(running), 'private_key', 'error'), 1);
    assert.equal(postJsonOk(await postJson(running.sidecar.egressUrl, deposit())), true, 'the old key stays in use');
  });

  it('SIGHUP to the serve process reloads the files by hand (polling slowed to an hour) and does not stop it', async () => {
    const [oldKeys, newKeys] = await Promise.all([makeKeys(), makeKeys()]);
    const simulator = await startSimulator({
      accounts: [{ username: TEST_USERNAME, password: TEST_PASSWORD, publicKeyPem: oldKeys.publicKeyPem }],
    });
    const env = await sidecarEnv(oldKeys, simulator.baseUrl, { SIDECAR_SECRET_POLL_INTERVAL_MS: '3600000' });
    const spawned = await spawnSidecar(env);
    after(async () => {
      await spawned.kill();
      await simulator.close();
    });
    simulator.setPublicKeys(TEST_USERNAME, [oldKeys.publicKeyPem, newKeys.publicKeyPem]);
    await replaceFile(oldKeys.privateKeyFile, newKeys.privateKeyPem);
    spawned.child.kill('SIGHUP');
    const reloaded = () =>
      spawned
        .output()
        .stdout.split('\n')
        .some((l) => l.includes('"event":"config.reload"') && l.includes(fingerprintOf(newKeys)));
    await waitFor('the reload log line', reloaded, 5_000);
    simulator.setPublicKeys(TEST_USERNAME, [newKeys.publicKeyPem]);
    assertAllSucceeded([await postJson(spawned.proxyUrl, deposit())], 'signed with the new key after SIGHUP');
    const metrics = await (await fetch(`${spawned.adminUrl}/metrics`)).text();
    assert.deepEqual(fingerprints(metrics), [fingerprintOf(newKeys)]);
    assert.equal(spawned.child.exitCode, null, 'still running');
  });

  it('a new upstream CA applies to new connections: valid bundles are installed, idle connections renewed', async () => {
    const keys = await makeKeys();
    const accounts = [{ username: TEST_USERNAME, password: TEST_PASSWORD, publicKeyPem: keys.publicKeyPem }];
    const simulator = await startSimulator({ accounts, tls: true });
    // The next CA: another name (a bundle of two CAs with one subject would be ambiguous to OpenSSL).
    const other = {
      caPem: (await generate([{ name: 'commonName', value: 'next gateway CA' }], { keySize: 2048 })).cert,
    };
    const caFile = join(keys.dir, 'gateway-ca.pem');
    await writeFile(caFile, simulator.caPem!);
    const running = await startTestSidecar(
      await sidecarEnv(keys, simulator.baseUrl, { ...POLL_ENV, SIDECAR_UPSTREAM_CA_FILE: caFile }),
    );
    after(async () => {
      await running.stop();
      await simulator.close();
    });
    await waitUntilReady(running.sidecar);
    // A bundle with the current and the next CA, as a CA rotation starts: traffic never notices.
    const load = traffic(running.sidecar.egressUrl);
    await sleep(200);
    await replaceFile(caFile, `${simulator.caPem!}\n${other.caPem}`);
    await waitFor('the CA reload', async () => reloads(await metricsText(running), 'upstream_ca', 'success') === 1);
    await sleep(200);
    assertAllSucceeded(await load.stop(), 'while the CA bundle changed');
    // A CA that did not sign the gateway's certificate: new connections refuse the gateway, so it is in use.
    await replaceFile(caFile, other.caPem);
    await waitFor(
      'the second CA reload',
      async () => reloads(await metricsText(running), 'upstream_ca', 'success') === 2,
    );
    const refused = await postJson(running.sidecar.egressUrl, deposit());
    assert.equal(refused.status >= 500, true, `a gateway certificate the CA did not sign: ${refused.body}`);
    // Back to the right CA: it works again without a restart.
    await replaceFile(caFile, simulator.caPem!);
    await waitFor(
      'the third CA reload',
      async () => reloads(await metricsText(running), 'upstream_ca', 'success') === 3,
    );
    assertAllSucceeded([await postJson(running.sidecar.egressUrl, deposit())], 'after the way back');
    // Not a certificate: refused and counted, the CA in use stays.
    await replaceFile(caFile, 'not a certificate\n');
    await waitFor('the refusal', async () => reloads(await metricsText(running), 'upstream_ca', 'error') === 1);
    assertAllSucceeded([await postJson(running.sidecar.egressUrl, deposit())], 'with the refused CA file in place');
  });
});

function postJsonOk(answer: { status: number }): boolean {
  return answer.status < 300;
}
