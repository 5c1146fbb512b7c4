// Delivered once: replays, redeliveries, concurrent copies, a failing application, a key rotation, and a
// replay memory that cannot answer.
import assert from 'node:assert/strict';
import { writeFile } from 'node:fs/promises';
import { after, before, describe, test } from 'node:test';
import { createLogger } from '../../src/observability/log.js';
import { MemoryStateStore } from '../../src/state/memory-store.js';
import { StateStoreUnavailableError } from '../../src/state/state-store.js';
import type { TestKeys } from '../support/keys.js';
import { makeKeys } from '../support/keys.js';
import { CapturedOutput } from '../support/sidecar.js';
import {
  deliver,
  gatewayKeys,
  ApplicationStub,
  keyFile,
  payloadJson,
  signPostback,
  startBareReceiver,
  startReceiver,
  startSignedReceiver,
  type ReceiverWorld,
} from './support.js';

let gateway: TestKeys;
let world: ReceiverWorld;

before(async () => {
  gateway = await gatewayKeys();
  world = await startSignedReceiver(gateway);
});
after(() => world.stop());

const deliveredCount = (payload: string) =>
  world.application.received.filter((r) => r.body.toString('utf8') === payload).length;

describe('delivered once', () => {
  test('the same signed request replayed (same nonce) gets 200 without a second delivery', async () => {
    const postback = await signPostback(gateway.privateKeyPem);
    assert.deepEqual((await deliver(world.receiverUrl, postback)).body, { status: 'forwarded' });
    const replay = await deliver(world.receiverUrl, postback);
    assert.equal(replay.status, 200);
    assert.deepEqual(replay.body, { status: 'duplicate' });
    assert.equal(deliveredCount(postback.payload), 1);
  });

  test('a redelivery with a fresh nonce (our 200 was lost) gets 200 without a second delivery', async () => {
    const payload = payloadJson();
    assert.equal(
      (await deliver(world.receiverUrl, await signPostback(gateway.privateKeyPem, { payload }))).status,
      200,
    );
    const again = await deliver(world.receiverUrl, await signPostback(gateway.privateKeyPem, { payload }));
    assert.equal(again.status, 200);
    assert.deepEqual(again.body, { status: 'duplicate' });
    assert.equal(deliveredCount(payload), 1);
  });

  test('concurrent copies of one payload are delivered once; the others are told to come back', async () => {
    world.application.delayMs = 300;
    try {
      const payload = payloadJson();
      const copies = await Promise.all(
        Array.from({ length: 5 }, () => signPostback(gateway.privateKeyPem, { payload })),
      );
      const answers = await Promise.all(copies.map((copy) => deliver(world.receiverUrl, copy)));
      const statuses = answers.map((a) => a.status).sort();
      assert.deepEqual(statuses, [200, 503, 503, 503, 503]);
      for (const answer of answers.filter((a) => a.status === 503)) {
        assert.equal(answer.code, 'postback.forward.in_progress');
        assert.equal(answer.headers.get('retry-after'), '5');
        assert.equal(answer.body.retryable, true);
      }
      assert.equal(deliveredCount(payload), 1);
      // The gateway's redelivery of a refused copy, after the first one went through: 200, not delivered again.
      const later = await deliver(world.receiverUrl, await signPostback(gateway.privateKeyPem, { payload }));
      assert.deepEqual(later.body, { status: 'duplicate' });
      assert.equal(deliveredCount(payload), 1);
    } finally {
      world.application.delayMs = 0;
    }
  });

  test('the application failing, then recovering: 503 + Retry-After, then the redelivery goes through once', async () => {
    const payload = payloadJson();
    world.application.status = () => 500;
    try {
      const failed = await deliver(world.receiverUrl, await signPostback(gateway.privateKeyPem, { payload }));
      assert.equal(failed.status, 503);
      assert.equal(failed.code, 'postback.forward.failed');
      assert.equal(failed.headers.get('retry-after'), '5');
      assert.equal(failed.body.retryable, true);
    } finally {
      world.application.status = () => 200;
    }
    const redelivered = await deliver(world.receiverUrl, await signPostback(gateway.privateKeyPem, { payload }));
    assert.deepEqual(redelivered.body, { status: 'forwarded' });
    const third = await deliver(world.receiverUrl, await signPostback(gateway.privateKeyPem, { payload }));
    assert.deepEqual(third.body, { status: 'duplicate' });
    assert.equal(deliveredCount(payload), 2, 'the failed attempt and the one that went through');
  });
});

describe('delivery failures', () => {
  test('an application that does not answer in time: 503, nothing remembered', async () => {
    const slow = await new ApplicationStub().start();
    slow.delayMs = 2_000;
    const other = await startSignedReceiver(gateway, { SIDECAR_POSTBACK_FORWARD_TIMEOUT_MS: '200' }, slow);
    try {
      const payload = payloadJson();
      const answer = await deliver(other.receiverUrl, await signPostback(gateway.privateKeyPem, { payload }));
      assert.equal(answer.status, 503);
      assert.equal(answer.code, 'postback.forward.failed');
      slow.delayMs = 0;
      const retry = await deliver(other.receiverUrl, await signPostback(gateway.privateKeyPem, { payload }));
      assert.deepEqual(retry.body, { status: 'forwarded' });
    } finally {
      await other.stop();
    }
  });

  test('an application that cannot be reached: 503', async () => {
    const other = await startSignedReceiver(gateway, {
      SIDECAR_POSTBACK_FORWARD_URL: 'http://127.0.0.1:1/nothing-listens',
    });
    try {
      const answer = await deliver(other.receiverUrl, await signPostback(gateway.privateKeyPem));
      assert.equal(answer.status, 503);
      assert.equal(answer.code, 'postback.forward.failed');
    } finally {
      await other.stop();
    }
  });
});

describe('key rotation', () => {
  test('a rotated key file is read without a restart: new key added, then the old one removed', async () => {
    const next = await makeKeys();
    const file = await keyFile(gateway.publicKeyPem);
    const rotating = await startReceiver({
      SIDECAR_POSTBACK_PUBLIC_KEY_FILE: file,
      SIDECAR_SECRET_POLL_INTERVAL_MS: '50',
    });
    const status = async (key: TestKeys) =>
      (await deliver(rotating.receiverUrl, await signPostback(key.privateKeyPem))).status;
    const eventually = async (key: TestKeys, expected: number) => {
      const until = Date.now() + 5_000;
      while ((await status(key)) !== expected) {
        if (Date.now() > until) throw new Error(`still not ${expected}`);
        await new Promise((r) => setTimeout(r, 50));
      }
    };
    try {
      assert.equal(await status(next), 401, 'the new key is not trusted yet');
      await writeFile(file, `${gateway.publicKeyPem}${next.publicKeyPem}`);
      await eventually(next, 200);
      assert.equal(await status(gateway), 200, 'the old key still verifies during the rotation');
      await writeFile(file, next.publicKeyPem);
      await eventually(gateway, 401);
      assert.equal(await status(next), 200);
      await writeFile(file, 'half-written');
      await new Promise((r) => setTimeout(r, 300));
      assert.equal(await status(next), 200, 'a refused file keeps the keys in use');
      assert.match(
        await rotating.running.sidecar.metrics.registry.metrics(),
        /signing_sidecar_config_reloads_total\{setting="postback_keys",outcome="success"\} 2/,
      );
    } finally {
      await rotating.stop();
    }
  });

  test('with the old and the new key in the file, postbacks signed by either are delivered', async () => {
    const next = await makeKeys();
    const rotating = await startReceiver({
      SIDECAR_POSTBACK_PUBLIC_KEY_FILE: await keyFile(gateway.publicKeyPem, next.publicKeyPem),
    });
    try {
      for (const key of [gateway, next]) {
        const answer = await deliver(rotating.receiverUrl, await signPostback(key.privateKeyPem));
        assert.equal(answer.status, 200);
      }
      assert.equal(rotating.application.received.length, 2);
    } finally {
      await rotating.stop();
    }
  });
});

/** Every call fails as a store that cannot be reached does. */
class UnavailableStore extends MemoryStateStore {
  override get(): Promise<string | undefined> {
    return Promise.reject(new StateStoreUnavailableError('down'));
  }
  override setIfAbsent(): Promise<boolean> {
    return Promise.reject(new StateStoreUnavailableError('down'));
  }
}

describe('the replay memory unavailable', () => {
  test('answers 503 with Retry-After and delivers nothing (never without the replay check)', async () => {
    const bare = await startBareReceiver(gateway, {
      store: new UnavailableStore(),
      log: createLogger('info', new CapturedOutput()),
    });
    try {
      const answer = await deliver(bare.receiverUrl, await signPostback(gateway.privateKeyPem));
      assert.equal(answer.status, 503);
      assert.equal(answer.code, 'postback.state.unavailable');
      assert.equal(answer.headers.get('retry-after'), '5');
      assert.equal(bare.application.received.length, 0);
      assert.match(
        await bare.metrics.registry.metrics(),
        /signing_sidecar_postbacks_total\{outcome="store_unavailable"\} 1/,
      );
    } finally {
      await bare.stop(1000);
    }
  });
});
