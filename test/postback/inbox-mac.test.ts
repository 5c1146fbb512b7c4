// Queued postbacks carry a MAC (SIDECAR_STATE_MAC_KEY_FILE, docs/fleet.md): a postback written straight into the
// inbox in Redis, by whoever can write under the key prefix, never reaches the application. It goes to the dead
// letters with the reason, counted and logged. A control replica without the MAC shows the same forgery would be
// delivered as verified.
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import type { RedisStateStore } from '../../src/state/redis-store.js';
import { seriesValue } from '../support/idempotent-calls.js';
import type { TestKeys } from '../support/keys.js';
import { startRedis, type TestRedis } from '../support/redis-server.js';
import { scratchDir } from '../support/scratch.js';
import { waitFor } from '../support/wait-for.js';
import {
  deliver,
  gatewayKeys,
  ApplicationStub,
  payloadJson,
  signPostback,
  startSignedReceiver,
  type ReceiverWorld,
} from './support.js';

const [KEY_A, KEY_B] = [randomBytes(32).toString('base64'), randomBytes(32).toString('base64')];
const REJECTED = 'signing_sidecar_state_records_rejected_total{kind="postback"}';

let redis: TestRedis;
let gateway: TestKeys;
let macKeyFile: string;
const cleanups: Array<() => Promise<void>> = [];

before(async () => {
  [redis, gateway] = await Promise.all([startRedis(), gatewayKeys()]);
  macKeyFile = join(scratchDir('state-mac-'), 'state-mac-key');
  await writeFile(macKeyFile, `${KEY_A}\n`, { mode: 0o600 });
});
after(async () => {
  for (const cleanup of cleanups.reverse()) await cleanup().catch(() => undefined);
  await redis?.close();
});

/** A `queued` receiver on the test's Redis: one attempt, then another after 1.5 s, then the dead letters. */
async function queuedWorld(env: NodeJS.ProcessEnv, application?: ApplicationStub): Promise<ReceiverWorld> {
  const world = await startSignedReceiver(
    gateway,
    {
      SIDECAR_STATE_STORE: 'redis',
      SIDECAR_REDIS_URL: redis.url,
      SIDECAR_REDIS_COMMAND_TIMEOUT_MS: '2000',
      SIDECAR_POSTBACK_DELIVERY: 'queued',
      SIDECAR_POSTBACK_RETRY_SCHEDULE: '0s,1500ms',
      SIDECAR_POSTBACK_VISIBILITY_TIMEOUT_MS: '3000',
      SIDECAR_POSTBACK_FORWARD_TIMEOUT_MS: '2000',
      // Rotations are applied by reload() in the test, not by a poll racing it.
      SIDECAR_SECRET_POLL_INTERVAL_MS: '3600000',
      ...env,
    },
    application,
  );
  cleanups.push(() => world.stop());
  return world;
}

const storeOf = (world: ReceiverWorld) => world.running.sidecar.store as RedisStateStore;
const newId = () => `pb_${randomBytes(16).toString('hex')}`;

/**
 * What APPEND (inbox-scripts.ts) would store, written with redis-cli: the entry's fields, its place in a line of its
 * own, the pending set and the stream. `fields` may hold a `mac`.
 */
async function writeEntry(world: ReceiverWorld, id: string, fields: Record<string, string>): Promise<void> {
  const key = (name: string) => storeOf(world).storedKey(name);
  const order = `postback:order:${id.slice(3)}`;
  const all = { order, received_ms: String(Date.now()), attempts: '0', ...fields };
  await redis.cli('HSET', key(`postback:entry:${id}`), ...Object.entries(all).flat());
  await redis.cli('ZADD', key('postback:pending'), String(Date.now()), id);
  await redis.cli('RPUSH', key(all.order), id);
  await redis.cli('XADD', key('postback:inbox'), '*', 'id', id);
}

/** A SUCCESS postback as the application would trust it, with the headers a verified one carries. */
function forgedFields(marker: string): Record<string, string> {
  return {
    payload: JSON.stringify({ transaction_id: `tx-${marker}`, status: 'SUCCESS', amount: '1000000.00' }),
    headers: JSON.stringify({ 'content-type': 'application/json', 'x-postback-verified': 'signature' }),
  };
}

async function deadReason(world: ReceiverWorld, id: string): Promise<string | undefined> {
  const key = (name: string) => storeOf(world).storedKey(name);
  const [score] = await redis.cli('ZSCORE', key('postback:dead'), id);
  if (score === undefined || score === '') return undefined;
  return (await redis.cli('HGET', key(`postback:entry:${id}`), 'last_error'))[0];
}

const received = (world: ReceiverWorld, marker: string) =>
  world.application.received.filter((r) => r.body.toString('utf8').includes(marker));

describe('queued postbacks signed with SIDECAR_STATE_MAC_KEY_FILE, on a real Redis', { timeout: 90_000 }, () => {
  test('the control: without the MAC, a postback written into Redis reaches the application as verified', async () => {
    const world = await queuedWorld({ SIDECAR_STATE_ACCEPT_UNSIGNED_RECORDS: 'true' });
    await writeEntry(world, newId(), forgedFields('control'));
    await waitFor('the forged postback delivered', () => received(world, 'tx-control').length === 1, 10_000);
    await world.stop();
  });

  test('with the MAC: postbacks written without one or with a wrong one are not delivered; dead letters, counted', async () => {
    const world = await queuedWorld({ SIDECAR_STATE_MAC_KEY_FILE: macKeyFile });
    const [unsigned, wrong] = [newId(), newId()];
    await writeEntry(world, unsigned, forgedFields('no-mac'));
    await writeEntry(world, wrong, {
      ...forgedFields('bad-mac'),
      mac: `mac1.${randomBytes(32).toString('base64url')}`,
    });
    // A genuine postback, received meanwhile, is delivered.
    const genuine = await signPostback(gateway.privateKeyPem);
    assert.deepEqual((await deliver(world.receiverUrl, genuine)).body, { status: 'accepted' });
    await waitFor(
      'both forgeries in the dead letters',
      async () => (await deadReason(world, unsigned)) !== undefined && (await deadReason(world, wrong)) !== undefined,
      10_000,
    );
    await world.application.waitFor(1);
    assert.equal(world.application.received[0]?.body.toString('utf8'), genuine.payload);
    assert.match((await deadReason(world, unsigned)) ?? '', /^refused: MAC missing/);
    assert.match((await deadReason(world, wrong)) ?? '', /^refused: MAC wrong/);
    // Time for a delivery to show up, had one been made.
    await new Promise((resolve) => setTimeout(resolve, 500));
    assert.equal(received(world, 'tx-no-mac').length + received(world, 'tx-bad-mac').length, 0);
    assert.equal(seriesValue(await world.running.sidecar.metrics.registry.metrics(), REJECTED), 2);
    // The control left its epoch unsigned too: refused as well (kind `store`), and replaced.
    const lines = world.running.logs
      .lines()
      .filter((l) => l.event === 'state.record_rejected' && l.kind === 'postback');
    assert.deepEqual(
      lines.map((l) => [l.kind, l.reason, l.key, l.level]),
      [
        ['postback', 'unsigned', `postback:entry:${unsigned}`, 50],
        ['postback', 'mismatch', `postback:entry:${wrong}`, 50],
      ],
    );
    assert.equal(world.running.logs.text.includes('1000000.00'), false, 'no record content in the logs');
    await world.stop();
  });

  test('a genuine postback copied under another id is refused there, and delivered under its own', async () => {
    const world = await queuedWorld({ SIDECAR_STATE_MAC_KEY_FILE: macKeyFile });
    world.application.status = () => 500;
    const genuine = await signPostback(gateway.privateKeyPem);
    await deliver(world.receiverUrl, genuine);
    await world.application.waitFor(1);
    // It waits for its second attempt: its entry is in Redis, MAC and all. A copy goes under a new id and line.
    const id = String(world.application.received[0]?.headers['x-postback-id']);
    const stored = await redis.cli('HGETALL', storeOf(world).storedKey(`postback:entry:${id}`));
    const fields = Object.fromEntries(
      Array.from({ length: stored.length / 2 }, (_, i) => [stored[2 * i]!, stored[2 * i + 1]!]),
    );
    assert.match(fields.mac ?? '', /^mac1\./);
    const copy = newId();
    const { payload = '', headers = '', mac = '' } = fields;
    await writeEntry(world, copy, { payload, headers, mac });
    world.application.status = () => 200;
    await waitFor('the copy refused', async () => (await deadReason(world, copy)) !== undefined, 10_000);
    assert.match((await deadReason(world, copy)) ?? '', /^refused: MAC wrong/);
    await world.application.waitFor(2);
    const copies = received(world, (JSON.parse(genuine.payload) as { transaction_id: string }).transaction_id);
    assert.deepEqual(
      copies.map((r) => r.headers['x-postback-id']),
      [id, id],
      'the genuine one twice (a failed attempt, then delivered), the copy never',
    );
    await world.stop();
  });

  test('a key rotation keeps the postbacks kept before it deliverable', async () => {
    const application = await new ApplicationStub().start();
    application.status = () => 503;
    const world = await queuedWorld({ SIDECAR_STATE_MAC_KEY_FILE: macKeyFile }, application);
    const genuine = await signPostback(gateway.privateKeyPem, { payload: payloadJson('rotation') });
    assert.deepEqual((await deliver(world.receiverUrl, genuine)).body, { status: 'accepted' });
    await application.waitFor(1);
    // Kept with A; before its second attempt the file names B first and keeps A.
    await writeFile(macKeyFile, `${KEY_B}\n${KEY_A}\n`);
    await world.running.sidecar.reload();
    application.status = () => 200;
    await application.waitFor(2);
    assert.equal(application.received[1]?.body.toString('utf8'), genuine.payload);
    assert.equal(seriesValue(await world.running.sidecar.metrics.registry.metrics(), REJECTED), 0);
    await world.stop();
  });
});
