// `queued` delivery on a real Redis: postbacks are answered 200 accepted once kept in the inbox, and reach the
// application exactly once when it is back; an application that keeps failing sends them to the dead letters;
// a Redis down at arrival is a 503 and nothing is kept.
import assert from 'node:assert/strict';
import { after, describe, test } from 'node:test';
import { postbacks } from '../../src/cli/postbacks.js';
import type { TestKeys } from '../support/keys.js';
import { runCommand } from '../tools/run-command.js';
import { startRedis, type TestRedis } from '../support/redis-server.js';
import {
  deliver,
  gatewayKeys,
  ApplicationStub,
  signPostback,
  startSignedReceiver,
  type ReceiverWorld,
} from './support.js';
import { waitFor } from '../support/wait-for.js';

const cleanups: Array<() => Promise<void>> = [];
after(async () => {
  for (const cleanup of cleanups.reverse()) await cleanup().catch(() => undefined);
});

async function queuedWorld(
  schedule: string,
  application?: ApplicationStub,
): Promise<{ redis: TestRedis; gateway: TestKeys; world: ReceiverWorld }> {
  const [redis, gateway] = await Promise.all([startRedis(), gatewayKeys()]);
  cleanups.push(() => redis.close());
  const world = await startSignedReceiver(
    gateway,
    {
      SIDECAR_STATE_STORE: 'redis',
      SIDECAR_REDIS_URL: redis.url,
      SIDECAR_POSTBACK_DELIVERY: 'queued',
      SIDECAR_POSTBACK_RETRY_SCHEDULE: schedule,
      SIDECAR_POSTBACK_VISIBILITY_TIMEOUT_MS: '3000',
      SIDECAR_POSTBACK_FORWARD_TIMEOUT_MS: '2000',
    },
    application,
  );
  cleanups.push(() => world.stop());
  return { redis, gateway, world };
}

/** The one key of that name under the sidecar's prefix and the account's tag. */
async function keyNamed(redis: TestRedis, name: string): Promise<string | undefined> {
  return (await redis.cli('KEYS', `*:${name}`)).find((line) => line.trim() !== '');
}

/** How many a stream (XLEN) or a sorted set (ZCARD) of the inbox holds. */
async function sizeOf(redis: TestRedis, command: 'XLEN' | 'ZCARD', name: string): Promise<number> {
  const key = await keyNamed(redis, name);
  return key === undefined ? 0 : Number((await redis.cli(command, key))[0]);
}

describe('queued postback delivery', { timeout: 60_000 }, () => {
  test('20 postbacks while the application is down are accepted, then each reaches it exactly once', async () => {
    const application = await new ApplicationStub().start();
    const port = Number(new URL(application.url).port);
    await application.stop();
    const { gateway, world } = await queuedWorld('0s,200ms,500ms,1s,2s,5s', application);
    const postbacks = await Promise.all(Array.from({ length: 20 }, () => signPostback(gateway.privateKeyPem)));
    const answers = await Promise.all(postbacks.map((postback) => deliver(world.receiverUrl, postback)));
    for (const answer of answers) {
      assert.equal(answer.status, 200);
      assert.deepEqual(answer.body, { status: 'accepted' });
    }
    // A redelivery of an accepted postback is not kept twice.
    assert.deepEqual((await deliver(world.receiverUrl, postbacks[0]!)).body, { status: 'duplicate' });
    await new Promise((resolve) => setTimeout(resolve, 300));
    assert.equal(application.received.length, 0);
    await application.start(port);
    await application.waitFor(20, 15_000);
    // Time for a second delivery to show up, if any were made.
    await new Promise((resolve) => setTimeout(resolve, 1_500));
    assert.equal(application.received.length, 20);
    const bodies = application.received.map((r) => r.body.toString('utf8')).sort();
    assert.deepEqual(bodies, postbacks.map((p) => p.payload).sort());
    const ids = new Set(application.received.map((r) => r.headers['x-postback-id']));
    assert.equal(ids.size, 20);
    for (const received of application.received) {
      assert.equal(received.headers['x-postback-verified'], 'signature');
      assert.match(String(received.headers['x-postback-attempt']), /^[1-6]$/);
      assert.equal(received.headers['content-type'], 'application/json');
    }
  });

  test('an application that always answers 500: dead letters after the schedule, counted; the CLI shows, replays and drops them', async () => {
    const application = await new ApplicationStub().start();
    application.status = () => 500;
    const { redis, gateway, world } = await queuedWorld('0s,100ms,200ms', application);
    const [first, second] = [await signPostback(gateway.privateKeyPem), await signPostback(gateway.privateKeyPem)];
    assert.deepEqual((await deliver(world.receiverUrl, first)).body, { status: 'accepted' });
    assert.deepEqual((await deliver(world.receiverUrl, second)).body, { status: 'accepted' });
    await waitFor('the dead letters', async () => (await sizeOf(redis, 'ZCARD', 'postback:dead')) === 2, 10_000);
    assert.equal(application.received.length, 6);
    const firstCopies = application.received.filter((r) => r.body.toString('utf8') === first.payload);
    assert.deepEqual(
      firstCopies.map((r) => r.headers['x-postback-attempt']),
      ['1', '2', '3'],
    );
    assert.equal(new Set(firstCopies.map((r) => r.headers['x-postback-id'])).size, 1);
    const id = String(firstCopies[0]?.headers['x-postback-id']);
    assert.match(id, /^pb_[0-9a-f]{32}$/);
    assert.equal(await sizeOf(redis, 'XLEN', 'postback:inbox'), 0);
    await waitFor(
      'the dead letters gauge',
      async () =>
        /signing_sidecar_postback_dead_letters 2\b/.test(await world.running.sidecar.metrics.registry.metrics()),
      10_000,
    );
    const metrics = await world.running.sidecar.metrics.registry.metrics();
    assert.match(metrics, /signing_sidecar_postback_deliveries_total\{outcome="dead_letter"\} 2/);
    assert.match(metrics, /signing_sidecar_postback_deliveries_total\{outcome="retry"\} 4/);

    const listed = await runCommand(postbacks, ['list', '--dead'], world.env);
    assert.equal(listed.code, 0, listed.stderr);
    assert.match(listed.stdout, /dead letters 2/);
    assert.match(listed.stdout, new RegExp(`${id}\\s+dead\\s+3 .*status 500`));
    // Ids, states and errors only: the payload (its invoice number) is shown by `show` alone.
    assert.doesNotMatch(listed.stdout, /inv-secret/);
    const shown = await runCommand(postbacks, ['show', id], world.env);
    assert.equal(shown.code, 0, shown.stderr);
    const detail = JSON.parse(shown.stdout) as { state: string; attempts: number; payload: unknown };
    assert.equal(detail.state, 'dead');
    assert.equal(detail.attempts, 3);
    assert.deepEqual(detail.payload, JSON.parse(first.payload));

    // Fixed: a replay delivers it once, with the same id and attempts from 1; a drop discards the other.
    application.status = () => 200;
    const before = application.received.length;
    const replayed = await runCommand(postbacks, ['replay', id], world.env);
    assert.equal(replayed.code, 0, replayed.stderr);
    assert.match(replayed.stdout, /replayed/);
    await application.waitFor(before + 1, 10_000);
    const redelivered = application.received.at(-1);
    assert.equal(redelivered?.headers['x-postback-id'], id);
    assert.equal(redelivered?.headers['x-postback-attempt'], '1');
    assert.equal(redelivered?.body.toString('utf8'), first.payload);
    const dropped = await runCommand(postbacks, ['drop', '--all'], world.env);
    assert.equal(dropped.code, 0, dropped.stderr);
    assert.match(dropped.stdout, /dropped 1 postback\b/);
    await waitFor('no dead letter', async () => (await sizeOf(redis, 'ZCARD', 'postback:dead')) === 0, 5_000);
    await new Promise((resolve) => setTimeout(resolve, 500));
    assert.equal(application.received.length, before + 1, 'the dropped postback is not delivered');
    const missing = await runCommand(postbacks, ['show', id], world.env);
    assert.equal(missing.code, 1);
    // No secret of the sidecar in anything the command printed.
    for (const run of [listed, shown, replayed, dropped, missing]) {
      assert.doesNotMatch(run.stdout + run.stderr, /PRIVATE KEY|password|signature=|x-signature/i);
    }
  });

  test("one transaction's postbacks in arrival order: a FAILED never overtakes a SUCCESS that is being retried", async () => {
    const application = await new ApplicationStub().start();
    let calls = 0;
    application.status = () => (++calls === 1 ? 503 : 200); // the first attempt of the first postback fails
    const { gateway, world } = await queuedWorld('0s,300ms', application);
    const payloads = ['SUCCESS', 'FAILED'].map((status) => JSON.stringify({ transaction_id: 'tx-ordered', status }));
    for (const payload of payloads) {
      const answer = await deliver(world.receiverUrl, await signPostback(gateway.privateKeyPem, { payload }));
      assert.deepEqual(answer.body, { status: 'accepted' });
    }
    await application.waitFor(3, 10_000);
    await new Promise((resolve) => setTimeout(resolve, 300));
    assert.deepEqual(
      application.received.map(
        (r) =>
          `${(JSON.parse(r.body.toString('utf8')) as { status: string }).status}#${String(r.headers['x-postback-attempt'])}`,
      ),
      ['SUCCESS#1', 'SUCCESS#2', 'FAILED#1'],
    );
  });

  test('a 2xx after the forward timeout does not count: the postback is delivered again, as the next attempt', async () => {
    const application = await new ApplicationStub().start();
    application.delayMs = 2_500; // past the 2 s forward timeout of queuedWorld
    const { redis, gateway, world } = await queuedWorld('0s,200ms', application);
    assert.deepEqual((await deliver(world.receiverUrl, await signPostback(gateway.privateKeyPem))).body, {
      status: 'accepted',
    });
    await application.waitFor(1, 5_000);
    application.delayMs = 0;
    await application.waitFor(2, 10_000);
    await waitFor('delivered', async () => (await sizeOf(redis, 'ZCARD', 'postback:pending')) === 0, 5_000);
    assert.deepEqual(
      application.received.map((r) => r.headers['x-postback-attempt']),
      ['1', '2'],
    );
  });

  test('Redis down at arrival: 503 and nothing kept; Redis back: the redelivery is accepted once and delivered once', async () => {
    const application = await new ApplicationStub().start();
    const { redis, gateway, world } = await queuedWorld('0s,100ms', application);
    const postback = await signPostback(gateway.privateKeyPem);
    await redis.stop();
    const answer = await deliver(world.receiverUrl, postback);
    assert.equal(answer.status, 503);
    assert.equal(answer.body.retryable, true);
    await redis.start();
    await new Promise((resolve) => setTimeout(resolve, 1_500));
    assert.equal(application.received.length, 0);
    assert.equal(await sizeOf(redis, 'ZCARD', 'postback:pending'), 0);
    // The gateway's redelivery, same bytes (a new nonce is a new postback to the replay memory, not the payload).
    await waitFor(
      'the redelivery accepted',
      async () => (await deliver(world.receiverUrl, postback)).status === 200,
      10_000,
    );
    await application.waitFor(1, 10_000);
    assert.deepEqual((await deliver(world.receiverUrl, postback)).body, { status: 'duplicate' });
    await new Promise((resolve) => setTimeout(resolve, 500));
    assert.equal(application.received.length, 1);
  });

  test('queued delivery with the memory store is refused at start, naming both settings', async () => {
    const [gateway, application] = await Promise.all([gatewayKeys(), new ApplicationStub().start()]);
    cleanups.push(() => application.stop());
    await assert.rejects(
      startSignedReceiver(gateway, { SIDECAR_POSTBACK_DELIVERY: 'queued', SIDECAR_STATE_STORE: 'memory' }, application),
      (err: Error) => /SIDECAR_POSTBACK_DELIVERY/.test(err.message) && /SIDECAR_STATE_STORE/.test(err.message),
    );
  });
});
