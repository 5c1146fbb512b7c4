// Accounts without signed postbacks: unsigned ones are trusted by source address only (SIDECAR_POSTBACK_ALLOW_CIDRS,
// checked before anything else), and a postback that carries signature headers is still verified.
import assert from 'node:assert/strict';
import { connect } from 'node:net';
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

/**
 * Opens a connection to `url` that sends nothing; resolves with how long the receiver kept it, or with `undefined`
 * if it was still open after `waitMs` (then closes it).
 */
function silentConnection(url: string, waitMs: number): Promise<number | undefined> {
  const { hostname, port } = new URL(url);
  const socket = connect({ host: hostname, port: Number(port) });
  return new Promise((resolve, reject) => {
    socket.once('connect', () => {
      const opened = performance.now();
      const timer = setTimeout(() => {
        socket.destroy();
        resolve(undefined);
      }, waitMs);
      socket.once('close', () => {
        clearTimeout(timer);
        resolve(performance.now() - opened);
      });
    });
    socket.once('error', reject);
  });
}

/** A receiver accepting unsigned postbacks from `allowCidrs` (and verifying signed ones with `gateway`'s key). */
const startUnsignedReceiver = (allowCidrs: string) =>
  startSignedReceiver(gateway, { SIDECAR_POSTBACK_ACCEPT_UNSIGNED: 'true', SIDECAR_POSTBACK_ALLOW_CIDRS: allowCidrs });

describe('unsigned postbacks accepted from the allowed ranges', () => {
  let world: ReceiverWorld;
  before(async () => {
    world = await startUnsignedReceiver('10.0.0.0/8, 127.0.0.0/8');
  });
  after(() => world.stop());

  test('are delivered marked unsigned, whatever the sender claimed, and delivered once', async () => {
    const postback = unsigned();
    const answer = await deliver(world.receiverUrl, postback);
    assert.equal(answer.status, 200);
    const got = world.application.received.at(-1)!;
    assert.equal(got.body.toString('utf8'), postback.payload);
    assert.equal(got.headers['x-postback-verified'], 'unsigned');
    assert.equal(got.headers['x-postback-nonce'], undefined);
    assert.equal(got.headers['x-postback-timestamp'], undefined);
    assert.deepEqual((await deliver(world.receiverUrl, postback)).body, { status: 'duplicate' });
    assert.equal(world.application.received.length, 1);
  });

  test('may keep a connection open while it prepares its request (the header deadline is 10 s)', async () => {
    assert.equal(await silentConnection(world.receiverUrl, 2_500), undefined);
  });

  test('a postback with signature headers is verified all the same', async () => {
    const forged = await signPostback((await gatewayKeys()).privateKeyPem);
    const answer = await deliver(world.receiverUrl, forged);
    assert.equal(answer.status, 401);
    assert.equal(answer.code, 'postback.signature.invalid');
    const genuine = await signPostback(gateway.privateKeyPem);
    assert.equal((await deliver(world.receiverUrl, genuine)).status, 200);
    assert.equal(world.application.received.at(-1)!.headers['x-postback-verified'], 'signature');
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
    assert.equal(world.application.received.length, 0);
  });

  test('cannot hold a connection for the header deadline: it is closed a second after its connect', async () => {
    const heldMs = await silentConnection(world.receiverUrl, 8_000);
    assert.ok(heldMs !== undefined, 'the refused source still held its connection after 8 s');
    assert.ok(heldMs >= 900 && heldMs < 4_000, `held for ${heldMs.toFixed(0)} ms`);
  });
});
