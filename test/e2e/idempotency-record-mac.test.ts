// Idempotency records on a real Redis carry a MAC (SIDECAR_STATE_MAC_KEY_FILE, docs/fleet.md): whoever can write
// under the key prefix cannot make the sidecar replay an answer no sidecar recorded, nor move a genuine answer to
// another Idempotency-Key. Each forgery is answered 500 sidecar.idempotency.record_unverified, never sent, counted
// and logged. A control replica without the MAC, on the same Redis, shows each forgery would work without it.
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { startSimulator, type RunningSimulator } from '@signing-sidecar/simulator';
import { requestFingerprint } from '../../src/idempotency/fingerprint.js';
import { idempotencyKey } from '../../src/idempotency/key.js';
import { encodeRecord } from '../../src/idempotency/record.js';
import type { RedisStateStore } from '../../src/state/redis-store.js';
import { DEPOSIT_PATH, freshDeposit, newKey, send, seriesValue } from '../support/idempotent-calls.js';
import { makeKeys, type TestKeys } from '../support/keys.js';
import { TEST_PASSWORD, TEST_USERNAME } from '../support/recording-gateway.js';
import { startRedis, type TestRedis } from '../support/redis-server.js';
import { sidecarEnv, startTestSidecar, waitUntilReady, type TestSidecar } from '../support/sidecar.js';
import { waitFor } from '../support/wait-for.js';

let redis: TestRedis;
let keys: TestKeys;
let simulator: RunningSimulator;
let macKeyFile: string;
/** Signs and checks its records. */
let guarded: TestSidecar;
/** Same Redis, same account, no MAC (SIDECAR_STATE_ACCEPT_UNSIGNED_RECORDS=true): the control. */
let unguarded: TestSidecar;

const [KEY_A, KEY_B] = [randomBytes(32).toString('base64'), randomBytes(32).toString('base64')];
const REJECTED = 'signing_sidecar_state_records_rejected_total{kind="idempotency"}';

async function replica(extra: NodeJS.ProcessEnv): Promise<TestSidecar> {
  const env = await sidecarEnv(keys, simulator.baseUrl, {
    SIDECAR_STATE_STORE: 'redis',
    SIDECAR_REDIS_URL: redis.url,
    SIDECAR_REDIS_COMMAND_TIMEOUT_MS: '2000',
    // Rotations are applied by reload() in the test, not by a poll racing it.
    SIDECAR_SECRET_POLL_INTERVAL_MS: '3600000',
    ...extra,
  });
  const running = await startTestSidecar(env);
  await waitUntilReady(running.sidecar);
  return running;
}

before(async () => {
  [redis, keys] = await Promise.all([startRedis(), makeKeys()]);
  simulator = await startSimulator({
    accounts: [{ username: TEST_USERNAME, password: TEST_PASSWORD, publicKeyPem: keys.publicKeyPem }],
  });
  macKeyFile = join(keys.dir, 'state-mac-key');
  await writeFile(macKeyFile, `${KEY_A}\n`, { mode: 0o600 });
  guarded = await replica({ SIDECAR_STATE_MAC_KEY_FILE: macKeyFile });
  unguarded = await replica({ SIDECAR_STATE_ACCEPT_UNSIGNED_RECORDS: 'true' });
});
after(async () => {
  await Promise.all([guarded?.stop(), unguarded?.stop()]);
  await simulator?.close();
  await redis?.close();
});

/** Where the sidecar keeps the record of `key`, as redis-cli names it. */
const storedKeyOf = (key: string): string =>
  (guarded.sidecar.store as RedisStateStore).storedKey(`idempotency:${idempotencyKey(key)!.sha256}`);

const rejectedCount = async (): Promise<number> =>
  seriesValue(await guarded.sidecar.metrics.registry.metrics(), REJECTED) ?? Number.NaN;

describe('idempotency records signed with SIDECAR_STATE_MAC_KEY_FILE, on a real Redis', () => {
  it('a settled answer written straight into Redis is not replayed, and the payment is not sent either', async () => {
    const key = newKey();
    const payment = freshDeposit();
    // What an attacker with write access to the prefix and knowledge of the request can write: a "done" record with
    // the right fingerprint, answering SUCCESS.
    const forged = encodeRecord({
      state: 'done',
      fingerprint: requestFingerprint(DEPOSIT_PATH, '', Buffer.from(payment)),
      answer: {
        status: 200,
        headers: { 'content-type': 'application/json' },
        body: Buffer.from('{"status":"SUCCESS","forged_marker":"f0rg3d"}'),
        code: 'ok',
      },
    });
    const transactions = simulator.transactions().length;
    const rejectedBefore = await rejectedCount();

    for (const [value, reason] of [
      [forged, 'unsigned'],
      [`mac1.${randomBytes(32).toString('base64url')}.${forged}`, 'mismatch'],
    ] as const) {
      await redis.cli('SET', storedKeyOf(key), value, 'PX', '600000');
      const refused = await send(guarded.sidecar.egressUrl, key, payment);
      assert.equal(refused.status, 500, refused.body.toString());
      assert.equal(refused.code, 'sidecar.idempotency.record_unverified');
      assert.equal(refused.retryable, false);
      assert.equal(refused.replayed, false);
      assert.equal(refused.body.includes('f0rg3d'), false);
      const line = guarded.logs.lines().findLast((l) => l.event === 'state.record_rejected');
      assert.deepEqual(
        { kind: line?.kind, reason: line?.reason, key: line?.key, level: line?.level },
        { kind: 'idempotency', reason, key: `idempotency:${idempotencyKey(key)!.sha256}`, level: 50 },
      );
      // The control: without the MAC, the same record is replayed as the gateway's answer.
      const replayed = await send(unguarded.sidecar.egressUrl, key, payment);
      assert.equal(replayed.replayed, true);
      assert.match(replayed.body.toString(), /f0rg3d/);
    }
    assert.equal(simulator.transactions().length, transactions, 'nothing reached the gateway');
    assert.equal(await rejectedCount(), rejectedBefore + 2);
    assert.equal(guarded.logs.text.includes('f0rg3d'), false, 'no record content in the logs');
    assert.equal(guarded.logs.text.includes(KEY_A), false, 'no MAC key in the logs');
  });

  it('a genuine answer copied under another Idempotency-Key is refused there, and still replayed under its own', async () => {
    const payment = freshDeposit();
    const [original, other] = [newKey(), newKey()];
    const first = await send(guarded.sidecar.egressUrl, original, payment);
    assert.ok(first.status < 300, first.body.toString());
    const transactions = simulator.transactions().length;
    const [stored] = await redis.cli('GET', storedKeyOf(original));
    assert.match(stored ?? '', /^mac1\./);
    await redis.cli('SET', storedKeyOf(other), stored!, 'PX', '600000');
    const moved = await send(guarded.sidecar.egressUrl, other, payment);
    assert.equal(moved.code, 'sidecar.idempotency.record_unverified');
    // The control: without the MAC the copy answers the other key's caller with the first payment's answer.
    assert.equal((await send(unguarded.sidecar.egressUrl, other, payment)).replayed, true);
    const retry = await send(guarded.sidecar.egressUrl, original, payment);
    assert.equal(retry.replayed, true);
    assert.ok(retry.body.equals(first.body));
    assert.equal(simulator.transactions().length, transactions, 'no second payment');
  });

  it('a key rotation keeps the answers recorded before it while the old key stays in the file', async () => {
    const [before, during] = [newKey(), newKey()];
    const [paymentBefore, paymentDuring] = [freshDeposit(), freshDeposit()];
    const first = await send(guarded.sidecar.egressUrl, before, paymentBefore);
    assert.ok(first.status < 300, first.body.toString());

    // The new key first (it signs), the old one kept (it still verifies).
    await writeFile(macKeyFile, `${KEY_B}\n${KEY_A}\n`);
    await guarded.sidecar.reload();
    assert.equal((await send(guarded.sidecar.egressUrl, before, paymentBefore)).replayed, true);
    const second = await send(guarded.sidecar.egressUrl, during, paymentDuring);
    assert.ok(second.status < 300 && !second.replayed, second.body.toString());

    // The old key removed: what it signed is refused, what the new key signed is still replayed.
    await writeFile(macKeyFile, `${KEY_B}\n`);
    await guarded.sidecar.reload();
    assert.equal((await send(guarded.sidecar.egressUrl, during, paymentDuring)).replayed, true);
    assert.equal(
      (await send(guarded.sidecar.egressUrl, before, paymentBefore)).code,
      'sidecar.idempotency.record_unverified',
    );
    await waitFor(
      'the reloads counted',
      async () =>
        seriesValue(
          await guarded.sidecar.metrics.registry.metrics(),
          'signing_sidecar_config_reloads_total{setting="state_mac_keys",outcome="success"}',
        ) === 2,
      5_000,
    );
  });
});
