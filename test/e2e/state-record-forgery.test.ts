// Every record the sidecar reads back from Redis is its own (docs/security.md, "Records in Redis"). Each forgery below
// is written with redis-cli as anyone who can write under the key prefix could, against a real Redis, the simulator
// and the sidecar as `serve` starts it: a token record whose access token cannot be sent and which claims a login in
// the future, a login cooldown and a token lock without an expiry, delivered marks for a payment's postback. The
// sidecar ignores each one, counts it, and recovers on its own: one login, payments go through, the genuine postback
// reaches the application. The same forgeries against a replica without the MAC key show what the value checks alone
// still catch.
import assert from 'node:assert/strict';
import { createHash, randomBytes } from 'node:crypto';
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { startSimulator, type RunningSimulator } from '@signing-sidecar/simulator';
import type { RedisStateStore } from '../../src/state/redis-store.js';
import { freshDeposit, seriesValue, send } from '../support/idempotent-calls.js';
import { makeKeys, type TestKeys } from '../support/keys.js';
import { TEST_PASSWORD, TEST_USERNAME } from '../support/recording-gateway.js';
import { startRedis, type TestRedis } from '../support/redis-server.js';
import { sidecarEnv, startTestSidecar, waitUntilReady, type TestSidecar } from '../support/sidecar.js';
import { waitFor } from '../support/wait-for.js';
import {
  ApplicationStub,
  deliver,
  gatewayKeys,
  keyFile,
  payloadJson,
  PUBLIC_URL,
  signPostback,
} from '../postback/support.js';

let redis: TestRedis;
let keys: TestKeys;
let gateway: TestKeys;
let simulator: RunningSimulator;
let application: ApplicationStub;
let macKeyFile: string;
const MAC_KEY = randomBytes(32).toString('base64');
const running: TestSidecar[] = [];

before(async () => {
  [redis, keys, gateway] = await Promise.all([startRedis(), makeKeys(), gatewayKeys()]);
  simulator = await startSimulator({
    accounts: [{ username: TEST_USERNAME, password: TEST_PASSWORD, publicKeyPem: keys.publicKeyPem }],
  });
  application = await new ApplicationStub().start();
  macKeyFile = join(keys.dir, 'state-mac-key');
  await writeFile(macKeyFile, `${MAC_KEY}\n`, { mode: 0o600 });
});
after(async () => {
  for (const sidecar of running) await sidecar.stop().catch(() => undefined);
  await application?.stop();
  await simulator?.close();
  await redis?.close();
});

/** A replica on the test's Redis under `prefix`, receiving postbacks (direct) and paying through the simulator. */
async function replica(prefix: string, extra: NodeJS.ProcessEnv): Promise<TestSidecar> {
  const env = await sidecarEnv(keys, simulator.baseUrl, {
    SIDECAR_STATE_STORE: 'redis',
    SIDECAR_REDIS_URL: redis.url,
    SIDECAR_REDIS_KEY_PREFIX: prefix,
    SIDECAR_REDIS_COMMAND_TIMEOUT_MS: '2000',
    SIDECAR_POSTBACK_FORWARD_URL: application.url,
    SIDECAR_POSTBACK_PUBLIC_URL: PUBLIC_URL,
    SIDECAR_POSTBACK_LISTEN_HOST: '127.0.0.1',
    SIDECAR_POSTBACK_LISTEN_PORT: '0',
    SIDECAR_POSTBACK_PUBLIC_KEY_FILE: await keyFile(gateway.publicKeyPem),
    ...extra,
  });
  const started = await startTestSidecar(env);
  running.push(started);
  return started;
}

const guardedEnv = (): NodeJS.ProcessEnv => ({ SIDECAR_STATE_MAC_KEY_FILE: macKeyFile });
const unguardedEnv = (): NodeJS.ProcessEnv => ({ SIDECAR_STATE_ACCEPT_UNSIGNED_RECORDS: 'true' });

const storeOf = (sidecar: TestSidecar) => sidecar.sidecar.store as RedisStateStore;
const logins = (): number => simulator.tokenGrants().password;
const rejected = async (sidecar: TestSidecar, kind: string): Promise<number> =>
  seriesValue(
    await sidecar.sidecar.metrics.registry.metrics(),
    `signing_sidecar_state_records_rejected_total{kind="${kind}"}`,
  ) ?? Number.NaN;

/**
 * What the review wrote: a token record whose access token carries `\r\n` (no header can hold it), valid for a week,
 * from a login a day in the future (it would win against every genuine chain), a cooldown and a lock that never
 * expire. `tagged`: with a made-up MAC tag in front, as a forger who read a genuine record would copy its form.
 */
async function forgeTokenRecords(prefixKey: (name: string) => string, tagged: boolean): Promise<void> {
  const now = Date.now();
  const record = JSON.stringify({
    v: 1,
    generation: 1_000_000,
    accessToken: 'forged\r\nx-injected: 1',
    refreshToken: 'forged-refresh',
    accessExpiresAtMs: now + 7 * 86_400_000,
    refreshExpiresAtMs: now + 7 * 86_400_000,
    refreshSpent: false,
    loginAtMs: now + 86_400_000,
    issuedAtMs: now + 86_400_000,
  });
  const tag = tagged ? `mac1.${randomBytes(32).toString('base64url')}.` : '';
  await redis.cli('SET', prefixKey('token:record'), `${tag}${record}`);
  await redis.cli('SET', prefixKey('token:login-cooldown'), `${tag}1`);
  await redis.cli('SET', prefixKey('token:lock'), `${tag}${randomBytes(16).toString('hex')}`);
}

/** A payment through `sidecar` answered by the gateway (2xx), within `ms`. */
async function paysWithin(sidecar: TestSidecar, ms: number): Promise<void> {
  let last = '';
  await waitFor(
    'a payment answered by the gateway',
    async () => {
      const reply = await send(sidecar.sidecar.egressUrl, undefined, freshDeposit());
      last = `${reply.status} ${reply.code ?? ''}`;
      return reply.status >= 200 && reply.status < 300;
    },
    ms,
  ).catch(() => assert.fail(`no payment went through in ${ms} ms; last answer ${last}`));
}

async function probes(sidecar: TestSidecar): Promise<{ ready: number; token: number; valid: unknown }> {
  const { adminUrl } = sidecar.sidecar;
  const ready = (await fetch(`${adminUrl}/readyz`)).status;
  const token = await fetch(`${adminUrl}/healthz/token`);
  const body = (await token.json()) as { valid?: unknown };
  return { ready, token: token.status, valid: body.valid };
}

describe('records forged in Redis, against a real Redis and the sidecar as serve runs it', { timeout: 120_000 }, () => {
  it('with the MAC: a forged token record, cooldown and lock are refused; a starting replica logs in once and pays', async () => {
    const prefix = `forgery-${randomBytes(4).toString('hex')}:`;
    const first = await replica(prefix, guardedEnv());
    await waitUntilReady(first.sidecar, 10_000);
    const key = (name: string) => storeOf(first).storedKey(name);
    // A replica in service: the forged record and an announcement of it change nothing it holds.
    await forgeTokenRecords(key, true);
    await redis.cli('PUBLISH', key('token:generation'), '1000000');
    await paysWithin(first, 5_000);
    await first.stop();

    // The review's finding: a restart did not help. A replica starting now finds all three forgeries in place.
    for (const tagged of [false, true]) {
      await forgeTokenRecords(key, tagged);
      const loginsBefore = logins();
      const next = await replica(prefix, guardedEnv());
      await paysWithin(next, 15_000);
      assert.equal(logins() - loginsBefore, 1, 'one login, through the lock, past the forged cooldown');
      assert.deepEqual(await probes(next), { ready: 200, token: 200, valid: true });
      assert.ok((await rejected(next, 'token')) >= 1, 'the forged token record is counted');
      const [stored] = await redis.cli('GET', key('token:record'));
      assert.match(stored ?? '', /^mac1\./, 'the forged record was replaced by a sealed one');
      const lines = next.logs.lines().filter((l) => l.event === 'state.record_rejected' && l.kind === 'token');
      assert.ok(lines.length >= 1);
      assert.equal(next.logs.text.includes('forged-refresh'), false, 'no record content in the logs');
      assert.equal(next.logs.text.includes(MAC_KEY), false, 'no MAC key in the logs');
      await next.stop();
    }
  });

  it('without the MAC: the value checks alone refuse the same token record, cooldown and lock', async () => {
    const prefix = `forgery-${randomBytes(4).toString('hex')}:`;
    const probe = await replica(prefix, unguardedEnv());
    const key = (name: string) => storeOf(probe).storedKey(name);
    await probe.stop();
    await forgeTokenRecords(key, false);
    const loginsBefore = logins();
    const next = await replica(prefix, unguardedEnv());
    await paysWithin(next, 15_000);
    assert.equal(logins() - loginsBefore, 1, 'one login');
    assert.deepEqual(await probes(next), { ready: 200, token: 200, valid: true });
    const line = next.logs.lines().find((l) => l.event === 'state.record_rejected' && l.kind === 'token');
    assert.equal(line?.reason, 'access token is not a b64token (RFC 6750)');
    assert.equal(await rejected(next, 'token'), 1);
    await next.stop();
  });

  it("with the MAC: delivered marks forged for a payment's postback do not swallow it", async () => {
    const prefix = `forgery-${randomBytes(4).toString('hex')}:`;
    const receiver = await replica(prefix, guardedEnv());
    const postbackUrl = receiver.sidecar.postbackUrl;
    assert.ok(postbackUrl !== undefined);
    const key = (name: string) => storeOf(receiver).storedKey(name);
    const rejectedBefore = await rejected(receiver, 'postback');
    for (const tagged of [false, true]) {
      // The review's attack: a mark for each possible payload of a known deposit. Here the one that matters.
      const payload = payloadJson(`tx-forged-mark-${String(tagged)}`);
      const digest = createHash('sha256').update(payload).digest('hex');
      const tag = tagged ? `mac1.${randomBytes(32).toString('base64url')}.` : '';
      await redis.cli('SET', key(`postback:delivered:${digest}`), `${tag}2026-11-29T00:00:00.000Z`);
      const answer = await deliver(postbackUrl, await signPostback(gateway.privateKeyPem, { payload }));
      assert.equal(answer.status, 200);
      assert.notEqual(answer.body.status, 'duplicate', 'not answered as delivered before');
      await waitFor(
        'the genuine postback at the application',
        () => application.received.some((r) => r.body.toString('utf8') === payload),
        5_000,
      );
    }
    assert.equal((await rejected(receiver, 'postback')) - rejectedBefore, 2);
    // A genuine redelivery is still answered from the sealed mark the delivery left.
    const again = payloadJson('tx-forged-mark-false');
    const redelivered = await deliver(postbackUrl, await signPostback(gateway.privateKeyPem, { payload: again }));
    assert.equal(redelivered.body.status, 'duplicate');
  });
});
