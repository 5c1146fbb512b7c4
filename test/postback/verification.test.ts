// What the receiver accepts and refuses, each answer as the gateway (and the application) sees it.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import type { TestKeys } from '../support/keys.js';
import {
  deliver,
  gatewayKeys,
  PATH,
  payloadJson,
  postbackLines,
  signPostback,
  startSignedReceiver,
  type ReceiverWorld,
} from './support.js';

let gateway: TestKeys;
let other: TestKeys;
let world: ReceiverWorld;

before(async () => {
  [gateway, other] = await Promise.all([gatewayKeys(), gatewayKeys()]);
  world = await startSignedReceiver(gateway);
});
after(() => world.stop());

const nowSeconds = () => Math.floor(Date.now() / 1000);

describe('a genuine signed postback', () => {
  test('reaches the application as the exact payload bytes with the verification headers', async () => {
    const before = world.application.received.length;
    const postback = await signPostback(gateway.privateKeyPem);
    const answer = await deliver(world.receiverUrl, {
      headers: { ...postback.headers, 'x-request-id': 'gw-req-1' },
      body: postback.body,
    });
    assert.equal(answer.status, 200);
    assert.deepEqual(answer.body, { status: 'forwarded' });
    assert.equal(world.application.received.length, before + 1);
    const got = world.application.received.at(-1)!;
    assert.equal(got.body.toString('utf8'), postback.payload);
    assert.equal(got.headers['content-type'], 'application/json');
    assert.equal(got.headers['x-postback-verified'], 'signature');
    assert.equal(got.headers['x-postback-timestamp'], postback.headers['x-timestamp']);
    assert.equal(got.headers['x-postback-nonce'], postback.headers['x-nonce']);
    assert.equal(got.headers['x-request-id'], 'gw-req-1');
    assert.equal(got.headers['x-signature'], undefined);
  });

  test('headers from the sender that claim verification are not passed on', async () => {
    const postback = await signPostback(gateway.privateKeyPem);
    const answer = await deliver(world.receiverUrl, {
      headers: {
        ...postback.headers,
        'x-postback-verified': 'forged-by-sender',
        'x-postback-nonce': 'sender-nonce',
        'x-postback-extra': 'sender',
      },
      body: postback.body,
    });
    assert.equal(answer.status, 200);
    const got = world.application.received.at(-1)!;
    assert.equal(got.headers['x-postback-verified'], 'signature');
    assert.equal(got.headers['x-postback-nonce'], postback.headers['x-nonce']);
    assert.equal(got.headers['x-postback-extra'], undefined);
  });

  test('is accepted at the edges of the window (60 s behind, 5 s ahead)', async () => {
    for (const timestamp of [String(nowSeconds() - 59), String(nowSeconds() + 4)]) {
      const answer = await deliver(world.receiverUrl, await signPostback(gateway.privateKeyPem, { timestamp }));
      assert.equal(answer.status, 200, `timestamp ${timestamp}`);
    }
  });
});

describe('refused, and never delivered', () => {
  const refused = async (postback: { headers: Record<string, string>; body: string }, status: number, code: string) => {
    const count = world.application.received.length;
    const answer = await deliver(world.receiverUrl, postback);
    assert.equal(answer.status, status, JSON.stringify(answer.body));
    assert.equal(answer.code, code);
    assert.equal(answer.body.retryable, false);
    assert.equal(typeof answer.body.message, 'string');
    assert.equal(world.application.received.length, count, 'nothing delivered');
  };

  test('a signature by another key (forged)', async () => {
    await refused(await signPostback(other.privateKeyPem), 401, 'postback.signature.invalid');
  });

  test('tampered data: the signature was made over other data', async () => {
    const genuine = await signPostback(gateway.privateKeyPem);
    const tampered = Buffer.from(genuine.payload.replace('100.50', '999.50')).toString('base64');
    await refused(
      { headers: genuine.headers, body: JSON.stringify({ data: tampered }) },
      401,
      'postback.signature.invalid',
    );
  });

  test('signed for another URL (a wrong public URL, or a postback meant for another environment)', async () => {
    const postback = await signPostback(gateway.privateKeyPem, {
      url: 'https://staging.example.com/gateway/postbacks',
    });
    await refused(postback, 401, 'postback.signature.invalid');
  });

  test('a stale timestamp (more than 60 s behind)', async () => {
    const postback = await signPostback(gateway.privateKeyPem, { timestamp: String(nowSeconds() - 120) });
    await refused(postback, 401, 'postback.timestamp.expired');
  });

  test('a future timestamp (more than 5 s ahead)', async () => {
    const postback = await signPostback(gateway.privateKeyPem, { timestamp: String(nowSeconds() + 30) });
    await refused(postback, 401, 'postback.timestamp.future');
  });

  test('no signature headers (unsigned postbacks are off)', async () => {
    const postback = await signPostback(gateway.privateKeyPem);
    await refused(
      { headers: { 'content-type': 'application/json' }, body: postback.body },
      401,
      'postback.signature.missing',
    );
  });

  test('some signature headers only', async () => {
    const postback = await signPostback(gateway.privateKeyPem);
    const { 'x-signature': _dropped, ...headers } = postback.headers;
    await refused({ headers, body: postback.body }, 401, 'postback.signature.missing');
  });

  test('signature headers that are repeated, empty or in another encoding are refused, never taken as unsigned', async () => {
    const genuine = await signPostback(gateway.privateKeyPem);
    const signature = genuine.headers['x-signature']!;
    const variants: Array<[string, Record<string, string>]> = [
      // A repeated header arrives joined ("a, b"): never one of the two picked.
      ['two X-Signature', { 'x-signature': `${signature}, ${signature}` }],
      ['two X-Timestamp', { 'x-timestamp': `${genuine.headers['x-timestamp']}, 1` }],
      ['empty X-Signature', { 'x-signature': '' }],
      ['base64url X-Signature', { 'x-signature': Buffer.from(signature, 'base64').toString('base64url') }],
      ['X-Signature without padding', { 'x-signature': signature.replace(/=+$/, '') }],
      ['a fractional X-Timestamp', { 'x-timestamp': `${genuine.headers['x-timestamp']}.0` }],
      ['a negative X-Timestamp', { 'x-timestamp': `-${genuine.headers['x-timestamp']}` }],
    ];
    for (const [name, override] of variants) {
      const count = world.application.received.length;
      const answer = await deliver(world.receiverUrl, {
        headers: { ...genuine.headers, ...override },
        body: genuine.body,
      });
      assert.equal(answer.status, 401, name);
      assert.equal(answer.code, 'postback.signature.invalid', name);
      assert.equal(world.application.received.length, count, `${name}: nothing delivered`);
    }
    // None of them burnt the genuine postback's nonce.
    assert.deepEqual((await deliver(world.receiverUrl, genuine)).body, { status: 'forwarded' });
  });

  test('a body that is not the envelope, data that is not base64, data that is not a JSON object', async () => {
    const cases = [
      '{"payload":"x"}',
      'not json',
      JSON.stringify({ data: 'eyJhIjoxfQ' }), // base64 without padding
      JSON.stringify({ data: Buffer.from('[1,2]').toString('base64') }),
      // Not UTF-8 (a lone 0xff byte), and a byte order mark: the application would parse other text than this.
      JSON.stringify({
        data: Buffer.concat([Buffer.from('{"a":"'), Buffer.from([0xff]), Buffer.from('"}')]).toString('base64'),
      }),
      JSON.stringify({ data: Buffer.from('\ufeff{"a":1}', 'utf8').toString('base64') }),
    ];
    for (const body of cases) {
      const data = (() => {
        try {
          return (JSON.parse(body) as { data?: string }).data;
        } catch {
          return undefined;
        }
      })();
      const postback = await signPostback(gateway.privateKeyPem, { data: data ?? 'e30=' });
      await refused({ headers: postback.headers, body }, 400, 'postback.body.invalid');
    }
  });

  test('a forged request does not burn the nonce of the genuine one', async () => {
    const genuine = await signPostback(gateway.privateKeyPem);
    const forged = await signPostback(other.privateKeyPem, {
      nonce: genuine.headers['x-nonce'],
      payload: genuine.payload,
    });
    await refused(forged, 401, 'postback.signature.invalid');
    const answer = await deliver(world.receiverUrl, genuine);
    assert.equal(answer.status, 200);
    assert.equal(answer.body.status, 'forwarded');
  });
});

describe('the HTTP surface', () => {
  test('other paths are 404, other methods 405 with Allow, bodies over 1 MiB 413', async () => {
    const postback = await signPostback(gateway.privateKeyPem);
    const notFound = await deliver(world.receiverUrl, postback, { path: `${PATH}/other` });
    assert.equal(notFound.status, 404);
    assert.equal(notFound.code, 'postback.route.not_found');
    const wrongMethod = await deliver(world.receiverUrl, { headers: {}, body: '' }, { method: 'GET' });
    assert.equal(wrongMethod.status, 405);
    assert.equal(wrongMethod.code, 'postback.method.not_allowed');
    assert.equal(wrongMethod.headers.get('allow'), 'POST');
    const big = JSON.stringify({ data: 'A'.repeat(1_100_000) });
    const tooLarge = await deliver(world.receiverUrl, { headers: postback.headers, body: big });
    assert.equal(tooLarge.status, 413);
    assert.equal(tooLarge.code, 'postback.body.too_large');
  });
});

describe('logs and metrics', () => {
  test('one line per postback with outcome, request id, nonce and digest; never the payload or signature', async () => {
    const postback = await signPostback(gateway.privateKeyPem, { payload: payloadJson('log-check') });
    await deliver(world.receiverUrl, {
      headers: { ...postback.headers, 'x-request-id': 'log-req' },
      body: postback.body,
    });
    const line = postbackLines(world.running).find((l) => l.requestId === 'log-req');
    assert.ok(line, 'a postback line');
    assert.equal(line.outcome, 'forwarded');
    assert.equal(line.nonce, postback.headers['x-nonce']);
    assert.match(String(line.payloadDigest), /^[0-9a-f]{64}$/);
    assert.equal(line.internalStatus, 200);
    const text = world.running.logs.text;
    assert.ok(!text.includes(postback.data), 'data not logged');
    assert.ok(!text.includes('inv-secret-log-check'), 'payload not logged');
    assert.ok(!text.includes(postback.headers['x-signature']!), 'signature not logged');
  });

  test('refused and failed postbacks leave neither payload, data nor signature in the log', async () => {
    const marker = (what: string) => payloadJson(`secret-${what}-${process.pid}`);
    const forged = await signPostback(other.privateKeyPem, { payload: marker('forged') });
    const notObject = await signPostback(gateway.privateKeyPem, {
      data: Buffer.from(`["secret-array-${process.pid}"]`).toString('base64'),
    });
    const failing = await signPostback(gateway.privateKeyPem, { payload: marker('failing') });
    assert.equal((await deliver(world.receiverUrl, forged)).status, 401);
    assert.equal((await deliver(world.receiverUrl, notObject)).status, 400);
    world.application.status = () => 500;
    try {
      assert.equal((await deliver(world.receiverUrl, failing)).status, 503);
    } finally {
      world.application.status = () => 200;
    }
    const text = world.running.logs.text;
    for (const postback of [forged, notObject, failing]) {
      assert.ok(!text.includes(postback.data), 'data not logged');
      assert.ok(!text.includes(postback.headers['x-signature']!), 'signature not logged');
    }
    for (const secret of ['secret-forged', 'secret-failing', 'secret-array']) assert.ok(!text.includes(secret), secret);
  });

  test('every outcome is counted', async () => {
    const metrics = await world.running.sidecar.metrics.registry.getSingleMetricAsString(
      'signing_sidecar_postbacks_total',
    );
    for (const outcome of [
      'forwarded',
      'signature_invalid',
      'timestamp_expired',
      'timestamp_future',
      'signature_missing',
      'body_invalid',
      'not_found',
      'method_not_allowed',
      'too_large',
    ]) {
      assert.match(metrics, new RegExp(`outcome="${outcome}"} [1-9]`), outcome);
    }
    assert.match(metrics, /outcome="source_forbidden"} 0/);
  });
});
