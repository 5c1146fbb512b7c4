// Two receivers (two replicas) sharing one real Redis: a postback replayed to the other replica is not delivered
// twice, and concurrent copies spread over both replicas are delivered once.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import type { TestKeys } from '../support/keys.js';
import { startRedis, type TestRedis } from '../support/redis-server.js';
import {
  deliver,
  gatewayKeys,
  ApplicationStub,
  payloadJson,
  signPostback,
  startSignedReceiver,
  type ReceiverWorld,
} from './support.js';

let redis: TestRedis;
let gateway: TestKeys;
let application: ApplicationStub;
let first: ReceiverWorld;
let second: ReceiverWorld;

before(async () => {
  [redis, gateway, application] = await Promise.all([
    startRedis({ user: true }),
    gatewayKeys(),
    new ApplicationStub().start(),
  ]);
  const env = {
    SIDECAR_STATE_STORE: 'redis',
    SIDECAR_REDIS_URL: redis.url,
    SIDECAR_REDIS_USERNAME: redis.username,
    SIDECAR_REDIS_PASSWORD_FILE: redis.passwordFile,
  };
  first = await startSignedReceiver(gateway, env, application);
  second = await startSignedReceiver(gateway, env, application);
});
after(async () => {
  await first.running.stop();
  await second.running.stop();
  await application.stop();
  await redis.close();
});

const delivered = (payload: string) => application.received.filter((r) => r.body.toString('utf8') === payload).length;

describe('two replicas on one Redis', () => {
  test('the same signed postback replayed to the other replica is answered 200 and not delivered again', async () => {
    const postback = await signPostback(gateway.privateKeyPem);
    assert.deepEqual((await deliver(first.receiverUrl, postback)).body, { status: 'forwarded' });
    const replay = await deliver(second.receiverUrl, postback);
    assert.equal(replay.status, 200);
    assert.deepEqual(replay.body, { status: 'duplicate' });
    const fresh = await deliver(
      second.receiverUrl,
      await signPostback(gateway.privateKeyPem, { payload: postback.payload }),
    );
    assert.deepEqual(fresh.body, { status: 'duplicate' });
    assert.equal(delivered(postback.payload), 1);
  });

  test('concurrent copies on both replicas are delivered once', async () => {
    application.delayMs = 300;
    try {
      const payload = payloadJson();
      const copies = await Promise.all(
        Array.from({ length: 4 }, () => signPostback(gateway.privateKeyPem, { payload })),
      );
      const answers = await Promise.all(
        copies.map((copy, i) => deliver((i % 2 === 0 ? first : second).receiverUrl, copy)),
      );
      assert.deepEqual(answers.map((a) => a.status).sort(), [200, 503, 503, 503]);
      assert.equal(delivered(payload), 1);
    } finally {
      application.delayMs = 0;
    }
  });

  test('with Redis down, postbacks are answered 503 and not delivered; back up, the redelivery goes through', async () => {
    const payload = payloadJson();
    await redis.stop();
    try {
      const answer = await deliver(first.receiverUrl, await signPostback(gateway.privateKeyPem, { payload }));
      assert.equal(answer.status, 503);
      assert.equal(answer.code, 'postback.state.unavailable');
      assert.equal(answer.headers.get('retry-after'), '5');
      assert.equal(delivered(payload), 0);
    } finally {
      await redis.start();
    }
    const until = Date.now() + 10_000;
    for (;;) {
      const answer = await deliver(first.receiverUrl, await signPostback(gateway.privateKeyPem, { payload }));
      if (answer.status === 200) break;
      if (Date.now() > until) assert.fail(`still ${answer.status} ${answer.code}`);
      await new Promise((r) => setTimeout(r, 100));
    }
    assert.equal(delivered(payload), 1);
  });
});
