// Queued delivery when Redis forgets (docs/fleet.md, "A Redis that comes back empty"): postbacks accepted while the
// application is down, then the dataset wiped, by a primary without persistence restarted before the Sentinels fail
// it over (its replica resynchronises to the empty dataset), and by FLUSHALL. Real redis-server, redis-sentinel and
// `serve` processes; each replica notices the wipe, counts it, and appends again what it accepted.
import assert from 'node:assert/strict';
import { after, describe, test } from 'node:test';
import { makeKeys } from '../support/keys.js';
import { startRedis } from '../support/redis-server.js';
import { startSentinelSet } from '../support/redis-topologies.js';
import { sidecarEnv } from '../support/sidecar.js';
import { spawnSidecar, type SpawnedSidecar } from '../support/spawned-sidecar.js';
import { waitFor } from '../support/wait-for.js';
import { deliver, gatewayKeys, ApplicationStub, keyFile, PUBLIC_URL, signPostback, type Received } from './support.js';

const cleanups: Array<() => Promise<void>> = [];
after(async () => {
  for (const cleanup of cleanups.reverse()) await cleanup().catch(() => undefined);
});

/** Transactions, each with a SUCCESS then a FAILED postback, both sent to the same replica (i % 2). */
const TRANSACTIONS = Array.from({ length: 8 }, (_, i) => `tx-wipe-${i}`);

/** One counter of a `serve` process, from its admin port. */
async function metric(replica: SpawnedSidecar, name: string): Promise<number> {
  const text = await (await fetch(`${replica.adminUrl}/metrics`)).text();
  const line = text.split('\n').find((l) => l.startsWith(`${name} `));
  return Number(line?.split(' ')[1] ?? Number.NaN);
}

function payloadOf(received: Received): { transaction_id: string; status: string } {
  return JSON.parse(received.body.toString('utf8')) as { transaction_id: string; status: string };
}

/**
 * Two replicas on `redisEnv` accept 16 postbacks while the application is down; `wipe` makes Redis forget them
 * (resolving with the moment the dataset was gone).
 * Then: each replica notices within 5 s (the alert's counter at 1, an error line), appends its 8 again, and once
 * the application is up every one of the 16 reaches it once, each transaction's in arrival order.
 */
async function acceptedThenWiped(redisEnv: NodeJS.ProcessEnv, wipe: () => Promise<number>): Promise<void> {
  const application = await new ApplicationStub().start();
  const port = Number(new URL(application.url).port);
  await application.stop();
  const [gateway, keys] = await Promise.all([gatewayKeys(), makeKeys()]);
  const env = await sidecarEnv(keys, 'http://127.0.0.1:1', {
    SIDECAR_LOG_LEVEL: 'info',
    // The test host is shared: a loaded moment must not turn into a 503 that this gateway stand-in never retries.
    SIDECAR_REDIS_COMMAND_TIMEOUT_MS: '1000',
    SIDECAR_POSTBACK_DELIVERY: 'queued',
    SIDECAR_POSTBACK_FORWARD_URL: application.url,
    SIDECAR_POSTBACK_PUBLIC_URL: PUBLIC_URL,
    SIDECAR_POSTBACK_PUBLIC_KEY_FILE: await keyFile(gateway.publicKeyPem),
    SIDECAR_POSTBACK_LISTEN_HOST: '127.0.0.1',
    SIDECAR_POSTBACK_LISTEN_PORT: '0',
    SIDECAR_POSTBACK_RETRY_SCHEDULE: '0s,500ms,1s,1s,1s,2s,2s,2s,2s,2s,2s,2s,2s,2s,2s,2s,2s,2s',
    ...redisEnv,
  });
  const replicas = await Promise.all([spawnSidecar(env), spawnSidecar(env)]);
  for (const replica of replicas) cleanups.push(() => replica.kill());
  for (const [i, id] of TRANSACTIONS.entries()) {
    for (const status of ['SUCCESS', 'FAILED']) {
      const payload = JSON.stringify({ transaction_id: id, status });
      const answer = await deliver(
        replicas[i % 2]!.postbackUrl!,
        await signPostback(gateway.privateKeyPem, { payload }),
      );
      assert.deepEqual(answer.body, { status: 'accepted' }, `${id} ${status}`);
    }
  }
  for (const replica of replicas) {
    assert.equal(await metric(replica, 'signing_sidecar_state_store_wipes_total'), 0, 'no wipe before the wipe');
  }

  const wipedAt = await wipe();
  await waitFor(
    'both replicas to notice the wipe',
    async () => {
      const counts = await Promise.all(replicas.map((r) => metric(r, 'signing_sidecar_state_store_wipes_total')));
      return counts.every((count) => count >= 1);
    },
    10_000,
  );
  const noticedInMs = Date.now() - wipedAt;
  assert.ok(noticedInMs <= 5_000, `noticed ${noticedInMs} ms after the wipe`);
  for (const replica of replicas) {
    const line = replica
      .output()
      .stdout.split('\n')
      .find((l) => l.includes('"event":"state_store.wiped"'));
    assert.ok(line !== undefined, 'the wipe is logged');
    assert.equal((JSON.parse(line) as { level: number }).level, 50, 'at error level');
  }
  await waitFor(
    'each replica to append its 8 postbacks again',
    async () => {
      const counts = await Promise.all(replicas.map((r) => metric(r, 'signing_sidecar_postback_requeued_total')));
      return counts.every((count) => count === 8);
    },
    15_000,
  );

  await application.start(port);
  cleanups.push(() => application.stop());
  const bodies = () => new Set(application.received.map((r) => r.body.toString('utf8')));
  await waitFor('every accepted postback at the application', () => bodies().size === 16, 30_000);
  await new Promise((resolve) => setTimeout(resolve, 1_000)); // room for a second delivery to show, if one were made
  assert.equal(application.received.length, 16, 'each postback once');
  assert.equal(new Set(application.received.map((r) => r.headers['x-postback-id'])).size, 16);
  for (const id of TRANSACTIONS) {
    const statuses = application.received
      .filter((r) => payloadOf(r).transaction_id === id)
      .map((r) => payloadOf(r).status);
    assert.deepEqual(statuses, ['SUCCESS', 'FAILED'], `${id}: in arrival order`);
  }
}

describe('queued delivery on a Redis that comes back empty', { timeout: 120_000 }, () => {
  test('a primary without persistence restarted before the Sentinels fail it over: noticed, every postback delivered', async () => {
    // Sentinels slow to call the primary down, as with a container runtime that restarts a killed node in seconds.
    const set = await startSentinelSet({ downAfterMs: 10_000 });
    cleanups.push(() => set.close());
    const before = await set.currentPrimary();
    await acceptedThenWiped(set.env, async () => {
      await set.primary.crash();
      await set.primary.start();
      const emptyAt = Date.now();
      // The replica resynchronises from the empty primary: the postbacks it held are gone too.
      await waitFor(
        'the replica to resynchronise',
        async () => (await set.replica.cli('INFO', 'replication')).some((l) => l.trim() === 'master_link_status:up'),
        10_000,
      );
      return emptyAt;
    });
    assert.equal(await set.currentPrimary(), before, 'no failover: the dataset was wiped, not handed over');
  });

  test('FLUSHALL (the short form): noticed, every postback delivered', async () => {
    const redis = await startRedis({ user: true });
    cleanups.push(() => redis.close());
    await acceptedThenWiped(
      {
        SIDECAR_STATE_STORE: 'redis',
        SIDECAR_REDIS_URL: redis.url,
        SIDECAR_REDIS_USERNAME: redis.username,
        SIDECAR_REDIS_PASSWORD_FILE: redis.passwordFile,
      },
      async () => {
        assert.deepEqual(await redis.cli('FLUSHALL'), ['OK']);
        return Date.now();
      },
    );
  });
});
