// Accounts without signed postbacks: unsigned ones are trusted by source address only (SIDECAR_POSTBACK_ALLOW_CIDRS,
// checked before anything else), and a postback that carries signature headers is still verified.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import type { TestKeys } from '../support/keys.js';
import { deliver, gatewayKeys, payloadJson, signPostback, startSignedReceiver, type ReceiverWorld } from './support.js';

const unsigned = (payload = payloadJson()) => ({
  headers: { 'content-type': 'application/json', 'x-postback-verified': 'signature' },
  body: JSON.stringify({ data: Buffer.from(payload).toString('base64') }),
  payload,
});

let gateway: TestKeys;
before(async () => {
  gateway = await gatewayKeys();
});

/** A receiver accepting unsigned postbacks from `allowCidrs` (and verifying signed ones with `gateway`'s key). */
const startUnsignedReceiver = (allowCidrs: string) =>
  startSignedReceiver(gateway, { SIDECAR_POSTBACK_ACCEPT_UNSIGNED: 'true', SIDECAR_POSTBACK_ALLOW_CIDRS: allowCidrs });

describe('unsigned postbacks accepted from the allowed ranges', () => {
  let world: ReceiverWorld;
  before(async () => {
    world = await startUnsignedReceiver('10.0.0.0/8, 127.0.0.0/8');
  });
  after(() => world.stop());

  test('are forwarded marked unsigned, whatever the sender claimed, and delivered once', async () => {
    const postback = unsigned();
    const answer = await deliver(world.receiverUrl, postback);
    assert.equal(answer.status, 200);
    const got = world.webhook.received.at(-1)!;
    assert.equal(got.body.toString('utf8'), postback.payload);
    assert.equal(got.headers['x-postback-verified'], 'unsigned');
    assert.equal(got.headers['x-postback-nonce'], undefined);
    assert.equal(got.headers['x-postback-timestamp'], undefined);
    assert.deepEqual((await deliver(world.receiverUrl, postback)).body, { status: 'duplicate' });
    assert.equal(world.webhook.received.length, 1);
  });

  test('a postback with signature headers is verified all the same', async () => {
    const forged = await signPostback((await gatewayKeys()).privateKeyPem);
    const answer = await deliver(world.receiverUrl, forged);
    assert.equal(answer.status, 401);
    assert.equal(answer.code, 'postback.signature.invalid');
    const genuine = await signPostback(gateway.privateKeyPem);
    assert.equal((await deliver(world.receiverUrl, genuine)).status, 200);
    assert.equal(world.webhook.received.at(-1)!.headers['x-postback-verified'], 'signature');
  });
});

describe('a source outside the allowed ranges', () => {
  let world: ReceiverWorld;
  before(async () => {
    world = await startUnsignedReceiver('10.0.0.0/8,2001:db8::/32');
  });
  after(() => world.stop());

  test('is refused 403 before anything else, signed or not, on any path', async () => {
    for (const [postback, path] of [
      [unsigned(), undefined],
      [await signPostback(gateway.privateKeyPem), undefined],
      [unsigned(), '/elsewhere'],
    ] as const) {
      const answer = await deliver(world.receiverUrl, postback, path === undefined ? {} : { path });
      assert.equal(answer.status, 403);
      assert.equal(answer.code, 'postback.source.forbidden');
    }
    assert.equal(world.webhook.received.length, 0);
  });
});
