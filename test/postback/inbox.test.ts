// `queued` delivery on a real Redis: postbacks are answered 200 accepted once kept in the inbox, and reach the
// application exactly once when it is back; an application that keeps failing sends them to the dead letters;
// a Redis down at arrival is a 503 and nothing is kept.
import assert from 'node:assert/strict';
import { after, describe, test } from 'node:test';
import type { TestKeys } from '../support/keys.js';
import { startRedis, type TestRedis } from '../support/redis-server.js';
import {
  deliver,
  gatewayKeys,
  InternalWebhook,
  signPostback,
  startSignedReceiver,
  type ReceiverWorld,
} from './support.js';

const cleanups: Array<() => Promise<void>> = [];
after(async () => {
  for (const cleanup of cleanups.reverse()) await cleanup().catch(() => undefined);
});

async function queuedWorld(
  schedule: string,
  webhook?: InternalWebhook,
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
    webhook,
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

async function until(check: () => Promise<boolean> | boolean, ms: number, what: string): Promise<void> {
  const deadline = Date.now() + ms;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 25));
  }
}

describe('queued postback delivery', { timeout: 60_000 }, () => {
  test('20 postbacks while the application is down are accepted, then each reaches it exactly once', async () => {
    const webhook = await new InternalWebhook().start();
    const port = Number(new URL(webhook.url).port);
    await webhook.stop();
    const { gateway, world } = await queuedWorld('0s,200ms,500ms,1s,2s,5s', webhook);
    const postbacks = await Promise.all(Array.from({ length: 20 }, () => signPostback(gateway.privateKeyPem)));
    const answers = await Promise.all(postbacks.map((postback) => deliver(world.receiverUrl, postback)));
    for (const answer of answers) {
      assert.equal(answer.status, 200);
      assert.deepEqual(answer.body, { status: 'accepted' });
    }
    // A redelivery of an accepted postback is not kept twice.
    assert.deepEqual((await deliver(world.receiverUrl, postbacks[0]!)).body, { status: 'duplicate' });
    await new Promise((resolve) => setTimeout(resolve, 300));
    assert.equal(webhook.received.length, 0);
    await webhook.start(port);
    await webhook.waitFor(20, 15_000);
    // Time for a second delivery to show up, if any were made.
    await new Promise((resolve) => setTimeout(resolve, 1_500));
    assert.equal(webhook.received.length, 20);
    const bodies = webhook.received.map((r) => r.body.toString('utf8')).sort();
    assert.deepEqual(bodies, postbacks.map((p) => p.payload).sort());
    const ids = new Set(webhook.received.map((r) => r.headers['x-postback-id']));
    assert.equal(ids.size, 20);
    for (const received of webhook.received) {
      assert.equal(received.headers['x-postback-verified'], 'signature');
      assert.match(String(received.headers['x-postback-attempt']), /^[1-6]$/);
      assert.equal(received.headers['content-type'], 'application/json');
    }
  });

  test('an application that always answers 500 sends the postback to the dead letters after the schedule', async () => {
    const webhook = await new InternalWebhook().start();
    webhook.status = () => 500;
    const { redis, gateway, world } = await queuedWorld('0s,100ms,200ms', webhook);
    const postback = await signPostback(gateway.privateKeyPem);
    assert.deepEqual((await deliver(world.receiverUrl, postback)).body, { status: 'accepted' });
    await until(async () => (await sizeOf(redis, 'ZCARD', 'postback:dead')) === 1, 10_000, 'the dead letter');
    assert.equal(webhook.received.length, 3);
    assert.deepEqual(
      webhook.received.map((r) => r.headers['x-postback-attempt']),
      ['1', '2', '3'],
    );
    assert.equal(new Set(webhook.received.map((r) => r.headers['x-postback-id'])).size, 1);
    assert.equal(await sizeOf(redis, 'XLEN', 'postback:inbox'), 0);
  });

  test('Redis down at arrival: 503, and nothing is kept or delivered', async () => {
    const webhook = await new InternalWebhook().start();
    const { redis, gateway, world } = await queuedWorld('0s,100ms', webhook);
    await redis.stop();
    const answer = await deliver(world.receiverUrl, await signPostback(gateway.privateKeyPem));
    assert.equal(answer.status, 503);
    await redis.start();
    await new Promise((resolve) => setTimeout(resolve, 1_500));
    assert.equal(webhook.received.length, 0);
    assert.equal(await sizeOf(redis, 'XLEN', 'postback:inbox'), 0);
  });

  test('queued delivery with the memory store is refused at start, naming both settings', async () => {
    const [gateway, webhook] = await Promise.all([gatewayKeys(), new InternalWebhook().start()]);
    cleanups.push(() => webhook.stop());
    await assert.rejects(
      startSignedReceiver(gateway, { SIDECAR_POSTBACK_DELIVERY: 'queued', SIDECAR_STATE_STORE: 'memory' }, webhook),
      (err: Error) => /SIDECAR_POSTBACK_DELIVERY/.test(err.message) && /SIDECAR_STATE_STORE/.test(err.message),
    );
  });
});
