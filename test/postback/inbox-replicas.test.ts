// Queued delivery as a fleet runs it: sidecar processes (`serve`) sharing one real Redis, a gateway stand-in that
// sends each postback once and never again, and an application that goes away, comes back, or is slow.
import assert from 'node:assert/strict';
import { after, describe, test } from 'node:test';
import { makeKeys, type TestKeys } from '../support/keys.js';
import { startRedis, type TestRedis } from '../support/redis-server.js';
import { sidecarEnv } from '../support/sidecar.js';
import { spawnSidecar, type SpawnedSidecar } from '../support/spawned-sidecar.js';
import { deliver, gatewayKeys, ApplicationStub, keyFile, PUBLIC_URL, signPostback, type Received } from './support.js';
import { waitFor } from '../support/wait-for.js';

const cleanups: Array<() => Promise<void>> = [];
after(async () => {
  for (const cleanup of cleanups.reverse()) await cleanup().catch(() => undefined);
});

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

interface Fleet {
  readonly redis: TestRedis;
  readonly gateway: TestKeys;
  /** Starts one more replica on the same Redis, delivering to `webhookUrl`. */
  readonly replica: (env?: NodeJS.ProcessEnv) => Promise<SpawnedSidecar & { readonly receiverUrl: string }>;
}

async function fleet(webhookUrl: string, env: NodeJS.ProcessEnv): Promise<Fleet> {
  const [redis, gateway, keys] = await Promise.all([startRedis({ user: true }), gatewayKeys(), makeKeys()]);
  cleanups.push(() => redis.close());
  const base = await sidecarEnv(keys, 'http://127.0.0.1:1', {
    SIDECAR_LOG_LEVEL: 'info',
    SIDECAR_STATE_STORE: 'redis',
    SIDECAR_REDIS_URL: redis.url,
    SIDECAR_REDIS_USERNAME: redis.username,
    SIDECAR_REDIS_PASSWORD_FILE: redis.passwordFile,
    // The test host is shared: a loaded moment must not turn into a 503 that this gateway stand-in never retries.
    SIDECAR_REDIS_COMMAND_TIMEOUT_MS: '1000',
    SIDECAR_POSTBACK_DELIVERY: 'queued',
    SIDECAR_POSTBACK_FORWARD_URL: webhookUrl,
    SIDECAR_POSTBACK_PUBLIC_URL: PUBLIC_URL,
    SIDECAR_POSTBACK_PUBLIC_KEY_FILE: await keyFile(gateway.publicKeyPem),
    SIDECAR_POSTBACK_LISTEN_HOST: '127.0.0.1',
    SIDECAR_POSTBACK_LISTEN_PORT: '0',
    ...env,
  });
  return {
    redis,
    gateway,
    replica: async (more = {}) => {
      const spawned = await spawnSidecar({ ...base, ...more });
      cleanups.push(() => spawned.kill());
      if (spawned.postbackUrl === undefined) throw new Error('the receiver did not start');
      return { ...spawned, receiverUrl: spawned.postbackUrl };
    },
  };
}

/** How many postbacks the account's inbox still holds undelivered (dead letters excluded). */
async function undelivered(redis: TestRedis): Promise<number> {
  const [key] = (await redis.cli('KEYS', '*:postback:pending')).filter((line) => line.trim() !== '');
  return key === undefined ? 0 : Number((await redis.cli('ZCARD', key))[0]);
}

function payloadOf(received: Received): { transaction_id: string; status: string } {
  return JSON.parse(received.body.toString('utf8')) as { transaction_id: string; status: string };
}

describe('queued delivery across replicas', { timeout: 110_000 }, () => {
  test('the application down for 12 s while 100 postbacks arrive, sent once each: each reaches it once, in order per transaction', async () => {
    const application = await new ApplicationStub().start();
    const port = Number(new URL(application.url).port);
    await application.stop();
    const { redis, gateway, replica } = await fleet(application.url, {
      // Shortened: about 25 s of attempts, six or more of them in the 12 s outage, so that every postback
      // outlives it.
      SIDECAR_POSTBACK_RETRY_SCHEDULE: '0s,1s,2s,2s,2s,2s,2s,2s,2s,3s,3s,3s',
    });
    const replicas = [await replica(), await replica()];
    const downSince = Date.now();
    // 50 transactions, each SUCCESS then FAILED (the second sent once the first was answered, as a gateway would),
    // alternating between the replicas; no postback is ever sent again.
    const transactions = Array.from({ length: 50 }, (_, i) => `tx-order-${i}`);
    await Promise.all(
      transactions.map(async (id, i) => {
        for (const [n, status] of ['SUCCESS', 'FAILED'].entries()) {
          const payload = JSON.stringify({ transaction_id: id, status, amount: '10.00', step: n });
          const target = replicas[(i + n) % 2]!;
          const answer = await deliver(target.receiverUrl, await signPostback(gateway.privateKeyPem, { payload }));
          assert.deepEqual(answer.body, { status: 'accepted' }, `${id} ${status}`);
        }
      }),
    );
    assert.equal(await undelivered(redis), 100);
    await sleep(Math.max(0, 12_000 - (Date.now() - downSince)));
    assert.equal(application.received.length, 0);
    await application.start(port);
    cleanups.push(() => application.stop());
    await application.waitFor(100, 30_000);
    await waitFor('an empty inbox', async () => (await undelivered(redis)) === 0, 10_000);
    await sleep(1_000); // room for a second delivery to show, if one were made
    assert.equal(application.received.length, 100, 'every postback once, none twice');
    assert.equal(new Set(application.received.map((r) => r.headers['x-postback-id'])).size, 100);
    for (const id of transactions) {
      const statuses = application.received
        .filter((r) => payloadOf(r).transaction_id === id)
        .map((r) => payloadOf(r).status);
      assert.deepEqual(statuses, ['SUCCESS', 'FAILED'], `${id}: in arrival order`);
    }
  });

  test('a replica killed (SIGKILL) while it delivers: another replica delivers what it held', async () => {
    const application = await new ApplicationStub().start();
    cleanups.push(() => application.stop());
    application.delayMs = 3_000; // slow enough for the kill to land while deliveries are in flight
    const { redis, gateway, replica } = await fleet(application.url, {
      SIDECAR_POSTBACK_FORWARD_TIMEOUT_MS: '4000',
      SIDECAR_POSTBACK_VISIBILITY_TIMEOUT_MS: '5000',
      SIDECAR_POSTBACK_RETRY_SCHEDULE: '0s,1s,1s,1s,1s',
      SIDECAR_POSTBACK_DELIVERY_CONCURRENCY: '4',
    });
    const doomed = await replica();
    const sent = await Promise.all(Array.from({ length: 6 }, () => signPostback(gateway.privateKeyPem)));
    for (const postback of sent) {
      assert.deepEqual((await deliver(doomed.receiverUrl, postback)).body, { status: 'accepted' });
    }
    // Killed once all four deliveries it holds have reached the application (each waits there 3 s for its answer):
    // killed sooner, one still on its way would be taken over as attempt 2 with attempt 1 never seen, as documented.
    await application.waitFor(4, 10_000);
    doomed.child.kill('SIGKILL');
    await doomed.exited;
    application.delayMs = 0;
    const survivor = await replica();
    await waitFor('the survivor to deliver everything', async () => (await undelivered(redis)) === 0, 30_000);
    const payloads = new Set(application.received.map((r) => r.body.toString('utf8')));
    assert.deepEqual([...payloads].sort(), sent.map((p) => p.payload).sort(), 'every postback reached the application');
    // Those the killed replica had in flight were delivered again, as the same postback (same id, next attempt).
    for (const payload of payloads) {
      const copies = application.received.filter((r) => r.body.toString('utf8') === payload);
      assert.equal(new Set(copies.map((r) => r.headers['x-postback-id'])).size, 1);
      assert.deepEqual(
        copies.map((r) => r.headers['x-postback-attempt']),
        copies.map((_, i) => String(i + 1)),
      );
    }
    assert.match(survivor.output().stdout, /"event":"postback.delivery"[^\n]*"outcome":"delivered"/);
  });

  test('a replica stopped (SIGTERM) finishes the deliveries in flight and leaves the rest to the others', async () => {
    const application = await new ApplicationStub().start();
    cleanups.push(() => application.stop());
    application.delayMs = 1_000;
    const { redis, gateway, replica } = await fleet(application.url, {
      SIDECAR_POSTBACK_DELIVERY_CONCURRENCY: '2',
      SIDECAR_SHUTDOWN_MAX_DELAY_MS: '5000',
    });
    const leaving = await replica();
    const sent = await Promise.all(Array.from({ length: 8 }, () => signPostback(gateway.privateKeyPem)));
    for (const postback of sent) await deliver(leaving.receiverUrl, postback);
    await application.waitFor(1, 10_000);
    leaving.child.kill('SIGTERM');
    assert.equal((await leaving.exited).code, 0);
    const deliveredBeforeExit = application.received.length;
    assert.ok(deliveredBeforeExit >= 1 && deliveredBeforeExit < 8, `${deliveredBeforeExit} delivered before the exit`);
    await replica();
    await waitFor('the other replica to deliver the rest', async () => (await undelivered(redis)) === 0, 30_000);
    assert.equal(application.received.length, 8, 'each postback once: those in flight were finished, not abandoned');
    assert.equal(new Set(application.received.map((r) => r.headers['x-postback-id'])).size, 8);
  });
});
