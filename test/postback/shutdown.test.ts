// Shutdown with postbacks in flight: one that finishes within SIDECAR_SHUTDOWN_MAX_DELAY_MS gets its 200; one that
// does not is answered 503 (the gateway redelivers elsewhere) and its claim is released.
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { deliver, gatewayKeys, signPostback, startSignedReceiver } from './support.js';

describe('shutdown', () => {
  test('a postback in flight finishes; one still waiting after the maximum delay is answered 503', async () => {
    const gateway = await gatewayKeys();
    const world = await startSignedReceiver(gateway, { SIDECAR_SHUTDOWN_MAX_DELAY_MS: '1000' });
    try {
      world.application.delayMs = 300;
      const quick = deliver(world.receiverUrl, await signPostback(gateway.privateKeyPem));
      await new Promise((r) => setTimeout(r, 100));
      const stopping = world.running.stop();
      assert.deepEqual((await quick).body, { status: 'forwarded' }, 'finished within the delay');
      await stopping;
      await assert.rejects(
        deliver(world.receiverUrl, await signPostback(gateway.privateKeyPem)),
        'the receiver no longer accepts connections',
      );
    } finally {
      await world.stop();
    }

    const slow = await startSignedReceiver(gateway, { SIDECAR_SHUTDOWN_MAX_DELAY_MS: '300' });
    try {
      slow.application.delayMs = 5_000;
      const waiting = deliver(slow.receiverUrl, await signPostback(gateway.privateKeyPem));
      await slow.application.waitFor(1, 5_000); // the forward reached the application, which holds its answer
      const started = Date.now();
      await slow.running.stop();
      const answer = await waiting;
      assert.equal(answer.status, 503);
      assert.equal(answer.code, 'postback.forward.failed');
      assert.ok(Date.now() - started < 3_000, 'shutdown did not wait for the application');
      const line = slow.running.logs.lines().find((l) => l.event === 'postback');
      assert.equal(line?.forwardFailure, 'aborted');
    } finally {
      await slow.stop();
    }
  });
});
