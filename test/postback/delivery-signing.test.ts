// What the sidecar delivers to the application is signed by the Standard Webhooks scheme, and the application
// verifies it with the reference library (standardwebhooks) as any application would: a pod of the namespace that
// POSTs a SUCCESS straight to the application is refused, whatever X-Postback-* headers it sends. Direct and queued
// delivery, a rotated secret, and no secret or signature in logs, metrics or the inbox.
import assert from 'node:assert/strict';
import { createHash, createSecretKey } from 'node:crypto';
import { rename, writeFile } from 'node:fs/promises';
import { after, before, describe, test } from 'node:test';
import { Webhook, WebhookVerificationError } from 'standardwebhooks';
import { postbacks } from '../../src/cli/postbacks.js';
import { DeliverySigner, FORWARD_SECRET_GRACE_MS } from '../../src/postback/delivery-signing.js';
import type { TestKeys } from '../support/keys.js';
import { startRedis } from '../support/redis-server.js';
import { waitFor } from '../support/wait-for.js';
import { runCommand } from '../tools/run-command.js';
import {
  deliver,
  forwardSecretFile,
  gatewayKeys,
  ApplicationStub,
  newForwardSecret,
  payloadJson,
  plainHeaders,
  signPostback,
  startSignedReceiver,
  verifyAsApplication,
  type Received,
  type ReceiverWorld,
} from './support.js';

const POSTBACK_ID = /^pb_[0-9a-f]{32}$/;

const cleanups: Array<() => Promise<void>> = [];
after(async () => {
  for (const cleanup of cleanups.reverse()) await cleanup().catch(() => undefined);
});

let gateway: TestKeys;
before(async () => {
  gateway = await gatewayKeys();
});

/** A receiver that signs its deliveries with `secret` (its file re-read every 50 ms). */
async function signingWorld(
  secret: string,
  env: NodeJS.ProcessEnv = {},
  application?: ApplicationStub,
): Promise<{ world: ReceiverWorld; secretFile: string }> {
  const secretFile = await forwardSecretFile(secret);
  const world = await startSignedReceiver(
    gateway,
    { SIDECAR_POSTBACK_FORWARD_SECRET_FILE: secretFile, SIDECAR_SECRET_POLL_INTERVAL_MS: '50', ...env },
    application,
  );
  cleanups.push(() => world.stop());
  return { world, secretFile };
}

const copiesOf = (world: ReceiverWorld, payload: string): Received[] =>
  world.application.received.filter((r) => r.body.toString('utf8') === payload);

/** POSTs straight to the application, as any pod of the namespace can. */
async function postToApplication(application: ApplicationStub, body: string, headers: Record<string, string>) {
  const before = application.received.length;
  await fetch(application.url, { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body });
  await application.waitFor(before + 1);
  return application.received.at(-1)!;
}

/** The secret and every signature the application got never appear in `text`. */
function assertNoSecretIn(text: string, secret: string, received: readonly Received[], where: string): void {
  assert.ok(!text.includes(secret.slice('whsec_'.length)), `${where}: the secret`);
  for (const copy of received) {
    for (const signature of String(copy.headers['webhook-signature']).split(' ')) {
      assert.ok(!text.includes(signature.slice('v1,'.length)), `${where}: a signature`);
    }
  }
}

describe('direct delivery, signed for the application', { timeout: 60_000 }, () => {
  const secret = newForwardSecret();
  let world: ReceiverWorld;
  before(async () => {
    ({ world } = await signingWorld(secret));
  });

  test('verifies with standardwebhooks; webhook-id is X-Postback-Id and stays the same on a redelivery', async () => {
    const payload = payloadJson();
    let failures = 1;
    world.application.status = () => (failures-- > 0 ? 500 : 200);
    try {
      const first = await deliver(world.receiverUrl, await signPostback(gateway.privateKeyPem, { payload }));
      assert.equal(first.code, 'postback.forward.failed');
      // The gateway's redelivery (a fresh nonce and timestamp): delivered again, under the same id.
      const again = await deliver(world.receiverUrl, await signPostback(gateway.privateKeyPem, { payload }));
      assert.deepEqual(again.body, { status: 'forwarded' });
    } finally {
      world.application.status = () => 200;
    }
    const copies = copiesOf(world, payload);
    assert.equal(copies.length, 2);
    const digest = createHash('sha256').update(payload).digest('hex');
    for (const copy of copies) {
      assert.deepEqual(verifyAsApplication(secret, copy), JSON.parse(payload), 'the library verifies and parses it');
      assert.equal(copy.headers['webhook-id'], `pb_${digest.slice(0, 32)}`);
      assert.equal(copy.headers['x-postback-id'], copy.headers['webhook-id']);
      assert.match(String(copy.headers['webhook-signature']), /^v1,[A-Za-z0-9+/]{43}=$/, 'one signature');
      const skew = Math.abs(Number(copy.headers['webhook-timestamp']) - Date.now() / 1000);
      assert.ok(skew < 30, `the attempt's own time (${skew} s off)`);
    }
    const line = world.running.logs
      .lines()
      .find(
        (l) => l.event === 'postback' && l.outcome === 'forwarded' && l.postbackId === copies[0]?.headers['webhook-id'],
      );
    assert.ok(line, 'the log line names the id the application got');
  });

  test('a SUCCESS POSTed straight to the application is refused by its library', async () => {
    const payload = payloadJson();
    await deliver(world.receiverUrl, await signPostback(gateway.privateKeyPem, { payload }));
    const [genuine] = copiesOf(world, payload);
    assert.ok(genuine);
    assert.doesNotThrow(() => verifyAsApplication(secret, genuine), 'what the sidecar delivers verifies');
    const success = JSON.stringify({ ...(JSON.parse(payload) as object), amount: '100000.00' });
    const forgeries: Array<[string, Record<string, string>]> = [
      // The only proof the application had before: a header anyone can write.
      ['X-Postback-* headers alone', { 'x-postback-verified': 'signature', 'x-postback-id': 'pb_forged' }],
      // A genuine request's headers over another body (seen on the wire, or replayed).
      [
        'genuine headers, altered body',
        Object.fromEntries(
          Object.entries(plainHeaders(genuine.headers)).filter(([name]) => /^(application|x-postback)-/.test(name)),
        ),
      ],
      // Signed with a secret the forger made up.
      [
        'signed with another secret',
        (() => {
          const id = String(genuine.headers['webhook-id']);
          const now = new Date();
          const signature = new Webhook(newForwardSecret()).sign(id, now, success);
          return {
            'webhook-id': id,
            'webhook-timestamp': String(Math.floor(now.getTime() / 1000)),
            'webhook-signature': signature,
          };
        })(),
      ],
    ];
    for (const [what, headers] of forgeries) {
      const forged = await postToApplication(world.application, success, headers);
      assert.throws(() => verifyAsApplication(secret, forged), WebhookVerificationError, what);
    }
  });

  test('a rotated secret file signs the next delivery, the previous secret beside it for the grace period', async () => {
    const { world: rotating, secretFile } = await signingWorld(secret);
    const next = newForwardSecret();
    await writeFile(`${secretFile}.tmp`, `${next}\n`);
    await rename(`${secretFile}.tmp`, secretFile);
    const metrics = () => rotating.running.sidecar.metrics.registry.metrics();
    const reloaded = /signing_sidecar_config_reloads_total\{setting="postback_forward_secret",outcome="success"\} 1/;
    await waitFor('the rotated secret', async () => reloaded.test(await metrics()), 10_000);
    const payload = payloadJson();
    await deliver(rotating.receiverUrl, await signPostback(gateway.privateKeyPem, { payload }));
    const [copy] = copiesOf(rotating, payload);
    assert.ok(copy);
    assert.equal(String(copy.headers['webhook-signature']).split(' ').length, 2, 'the new and the previous');
    assert.deepEqual(verifyAsApplication(next, copy), JSON.parse(payload), 'an application with the new secret');
    assert.deepEqual(verifyAsApplication(secret, copy), JSON.parse(payload), 'one that still has the old one');
    // A half-written file is refused (counted, logged by name only); the new secret stays in use.
    await writeFile(secretFile, 'whsec_');
    const refused = /signing_sidecar_config_reloads_total\{setting="postback_forward_secret",outcome="error"\} 1/;
    await waitFor('the refused file', async () => refused.test(await metrics()), 10_000);
    const later = payloadJson();
    await deliver(rotating.receiverUrl, await signPostback(gateway.privateKeyPem, { payload: later }));
    assert.doesNotThrow(() => verifyAsApplication(next, copiesOf(rotating, later)[0]!));
    const logs = rotating.running.logs.text;
    assert.match(logs, /"setting":"SIDECAR_POSTBACK_FORWARD_SECRET_FILE \(postback.forwardSecretFile\)"/);
    assertNoSecretIn(logs, next, rotating.application.received, 'logs');
    assertNoSecretIn(logs, secret, rotating.application.received, 'logs');
  });

  test('neither the secret nor a signature appears in the logs or the metrics', async () => {
    const text = `${world.running.logs.text}\n${await world.running.sidecar.metrics.registry.metrics()}`;
    assert.ok(world.application.received.length >= 3);
    assertNoSecretIn(text, secret, world.application.received, 'logs and metrics');
  });
});

describe('queued delivery on Redis, signed for the application', { timeout: 60_000 }, () => {
  test('every attempt is signed with its own timestamp under the one webhook-id; the inbox keeps no signature', async () => {
    const redis = await startRedis();
    cleanups.push(() => redis.close());
    const secret = newForwardSecret();
    const application = await new ApplicationStub().start();
    let failures = 2;
    application.status = () => (failures-- > 0 ? 503 : 200);
    const { world } = await signingWorld(
      secret,
      {
        SIDECAR_STATE_STORE: 'redis',
        SIDECAR_REDIS_URL: redis.url,
        SIDECAR_POSTBACK_DELIVERY: 'queued',
        SIDECAR_POSTBACK_RETRY_SCHEDULE: '0s,1s,1s',
        SIDECAR_POSTBACK_VISIBILITY_TIMEOUT_MS: '3000',
        SIDECAR_POSTBACK_FORWARD_TIMEOUT_MS: '2000',
      },
      application,
    );
    const payload = payloadJson();
    const answer = await deliver(world.receiverUrl, await signPostback(gateway.privateKeyPem, { payload }));
    assert.deepEqual(answer.body, { status: 'accepted' });
    await application.waitFor(1, 20_000);
    // What the inbox keeps (and `postbacks show` prints) holds no signature: each is made at its attempt.
    const id = String(application.received[0]?.headers['webhook-id']);
    assert.match(id, POSTBACK_ID);
    const shown = await runCommand(postbacks, ['show', id], world.env);
    assert.equal(shown.code, 0, shown.stderr);
    assert.match(shown.stdout, /x-postback-verified/);
    assert.doesNotMatch(shown.stdout, /webhook-/);
    await application.waitFor(3, 20_000);
    const copies = copiesOf(world, payload);
    assert.deepEqual(
      copies.map((c) => c.headers['x-postback-attempt']),
      ['1', '2', '3'],
    );
    for (const copy of copies) {
      const attempt = String(copy.headers['x-postback-attempt']);
      assert.deepEqual(verifyAsApplication(secret, copy), JSON.parse(payload), `attempt ${attempt}`);
      assert.equal(copy.headers['webhook-id'], id, 'the same id on every attempt');
      assert.equal(copy.headers['x-postback-id'], id);
    }
    // Each attempt signs its own time: the third, two retries of a second later, never carries the arrival's.
    const times = copies.map((c) => Number(c.headers['webhook-timestamp']));
    assert.ok(times[2]! > times[0]!, `timestamps ${times.join(', ')}`);
    const text = `${world.running.logs.text}\n${await world.running.sidecar.metrics.registry.metrics()}`;
    assertNoSecretIn(text, secret, copies, 'logs and metrics');
  });
});

describe('the signer', () => {
  test('after a rotation the previous secret signs beside the new one until the grace period ends', () => {
    const [old, next] = [newForwardSecret(), newForwardSecret()];
    const key = (secret: string) => createSecretKey(Buffer.from(secret.slice('whsec_'.length), 'base64'));
    // A clock an hour in the past, so that the signed timestamps stay within the library's 5-minute tolerance.
    let now = Date.now() - FORWARD_SECRET_GRACE_MS - 2_000;
    const signer = new DeliverySigner(key(old), () => now);
    signer.replaceSecret(key(next));
    const rotatedAt = now;
    const body = payloadJson();
    const verifies = (secret: string, headers: Record<string, string>) => {
      try {
        new Webhook(secret).verify(body, headers);
        return true;
      } catch {
        return false;
      }
    };
    now = rotatedAt + FORWARD_SECRET_GRACE_MS - 1;
    const during = signer.headers('pb_1', body);
    assert.deepEqual([verifies(next, during), verifies(old, during)], [true, true], 'during the grace period');
    now = rotatedAt + FORWARD_SECRET_GRACE_MS;
    const afterwards = signer.headers('pb_1', body);
    assert.deepEqual([verifies(next, afterwards), verifies(old, afterwards)], [true, false], 'after it');
    signer.replaceSecret(key(next));
    assert.equal(signer.headers('pb_1', body)['webhook-signature']?.split(' ').length, 1, 'the same secret again');
  });
});
