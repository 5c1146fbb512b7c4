// Idempotency keys across a fleet: replicas sharing one real Redis (SIDECAR_STATE_STORE=redis) recognise
// each other's keys. Payments are counted where they land: the simulator's transactions, or the recording
// gateway's requests carrying one payment's body.
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { startSimulator, type RunningSimulator } from '@signing-sidecar/simulator';
import { assertKeyedRefusedUnkeyedSent, freshDeposit, newKey, send } from '../support/idempotent-calls.js';
import { makeKeys, type TestKeys } from '../support/keys.js';
import { RecordingGateway, TEST_PASSWORD, TEST_USERNAME } from '../support/recording-gateway.js';
import { startRedis, type TestRedis } from '../support/redis-server.js';
import { sidecarEnv, startTestSidecar, untilInFlight, waitUntilReady, type TestSidecar } from '../support/sidecar.js';
import { spawnSidecar } from '../support/spawned-sidecar.js';
import { waitFor } from '../support/wait-for.js';

let redis: TestRedis;
let keys: TestKeys;
before(async () => {
  [redis, keys] = await Promise.all([startRedis(), makeKeys()]);
});
after(async () => {
  await redis.close();
});

// A generous command timeout: fifty requests on three processes of a loaded test machine can keep an event loop
// busy past the default 100 ms, and these tests are about exactly-once, not about a slow Redis.
const fleetEnv = (): NodeJS.ProcessEnv => ({
  SIDECAR_STATE_STORE: 'redis',
  SIDECAR_REDIS_URL: redis.url,
  SIDECAR_REDIS_COMMAND_TIMEOUT_MS: '2000',
});

async function replica(baseUrl: string, now?: () => number): Promise<TestSidecar> {
  const running = await startTestSidecar(await sidecarEnv(keys, baseUrl, fleetEnv()), now ? { now } : {});
  await waitUntilReady(running.sidecar);
  return running;
}

describe('Idempotency-Key across replicas sharing one Redis (real simulator)', () => {
  let simulator: RunningSimulator;
  let one: TestSidecar;
  let two: TestSidecar;
  before(async () => {
    simulator = await startSimulator({
      accounts: [{ username: TEST_USERNAME, password: TEST_PASSWORD, publicKeyPem: keys.publicKeyPem }],
    });
    one = await replica(simulator.baseUrl);
    two = await replica(simulator.baseUrl);
  });
  after(async () => {
    await Promise.all([one.stop(), two.stop()]);
    await simulator.close();
  });

  it('a retry on a second replica after the first answered gets the replay; one transaction', async () => {
    const before = simulator.transactions().length;
    const key = newKey();
    const payment = freshDeposit();
    const first = await send(one.sidecar.egressUrl, key, payment);
    assert.ok(first.status < 300, first.body.toString());
    const retry = await send(two.sidecar.egressUrl, key, payment);
    assert.equal(retry.status, first.status);
    assert.equal(retry.replayed, true);
    assert.ok(retry.body.equals(first.body), 'byte for byte');
    assert.equal(simulator.transactions().length, before + 1);
  });

  it('fifty concurrent retries of one key across two replicas reach the gateway once', async () => {
    const before = simulator.transactions().length;
    const key = newKey();
    const payment = freshDeposit();
    const replies = await Promise.all(
      Array.from({ length: 50 }, (_, i) => send((i % 2 ? one : two).sidecar.egressUrl, key, payment)),
    );
    const summary = [...new Set(replies.map((r) => `${r.status} ${r.code ?? ''} ${r.body.toString().slice(0, 200)}`))];
    assert.equal(simulator.transactions().length, before + 1, summary.join('\n'));
    const answers = replies.filter((r) => r.status < 300);
    assert.equal(answers.length + replies.filter((r) => r.code === 'sidecar.idempotency.in_progress').length, 50);
    assert.equal(answers.filter((r) => !r.replayed).length, 1);
    for (const answer of answers) assert.ok(answer.body.equals(answers[0]!.body));
  });
});

describe('a replica killed between send and answer', () => {
  // The lease's own story is in idempotency-takeover.test.ts; here a lease longer than the deadline shows the
  // deadline still bounds a claim whose lease never runs out.
  it('with a lease longer than the claim deadline: in progress, then, after the deadline, outcome_unknown', async () => {
    const gateway = await new RecordingGateway().start();
    gateway.holdUntil = Number.POSITIVE_INFINITY; // the gateway has the request and holds its answer
    const doomedEnv = { ...fleetEnv(), SIDECAR_IDEMPOTENCY_LEASE_MS: '600000' };
    const doomed = await spawnSidecar(await sidecarEnv(keys, gateway.url, doomedEnv));
    let survivor: TestSidecar | undefined;
    try {
      await waitFor('the condition', () => gateway.grants.length > 0);
      const key = newKey();
      const payment = freshDeposit();
      const lost = send(doomed.proxyUrl, key, payment).catch((err: unknown) => err);
      await waitFor('the condition', () => gateway.requests.length === 1);
      doomed.child.kill('SIGKILL');
      await doomed.exited;
      assert.ok((await lost) instanceof Error, 'the caller of the killed replica got no answer');

      let offsetMs = 0;
      survivor = await replica(gateway.url, () => Date.now() + offsetMs);
      const early = await send(survivor.sidecar.egressUrl, key, payment);
      assert.equal(early.status, 409);
      assert.equal(early.code, 'sidecar.idempotency.in_progress');
      // Past 119 s, the longest request time here: 115 s with the default settings + 2 x the 2 s command timeout.
      offsetMs = 120_000;
      const late = await send(survivor.sidecar.egressUrl, key, payment);
      assert.equal(late.status, 502);
      assert.equal(late.code, 'sidecar.upstream.outcome_unknown');
      assert.equal(late.retryable, false);
      assert.equal(late.replayed, true);
      const again = await send(survivor.sidecar.egressUrl, key, payment);
      assert.ok(again.body.equals(late.body) && again.replayed);
      const copies = gateway.requests.filter((r) => r.body === gateway.requests[0]!.body);
      assert.equal(copies.length, 1, 'never resent');
    } finally {
      await doomed.kill();
      await survivor?.stop();
      await gateway.stop();
    }
  });
});

describe('Redis down', () => {
  it('a keyed request is refused 503 unavailable and not sent; one without a key still goes', async () => {
    const gateway = await new RecordingGateway().start();
    const running = await replica(gateway.url);
    try {
      await redis.stop();
      await assertKeyedRefusedUnkeyedSent(running.sidecar.egressUrl, gateway);
    } finally {
      await redis.start();
      await running.stop();
      await gateway.stop();
    }
  });
});

describe('shutdown with the Redis store', () => {
  it('a keyed request cut off by shutdown keeps outcome_unknown: a retry on another replica gets it at once', async () => {
    const gateway = await new RecordingGateway().start();
    gateway.holdUntil = Number.POSITIVE_INFINITY; // the gateway has the request and holds its answer
    const stopping = await startTestSidecar(
      await sidecarEnv(keys, gateway.url, { ...fleetEnv(), SIDECAR_SHUTDOWN_MAX_DELAY_MS: '200' }),
    );
    let other: TestSidecar | undefined;
    try {
      await waitUntilReady(stopping.sidecar);
      other = await replica(gateway.url);
      const key = newKey();
      const payment = freshDeposit();
      const pending = send(stopping.sidecar.egressUrl, key, payment);
      await waitFor('the condition', () => gateway.requests.length === 1);
      await stopping.stop();
      const cut = await pending;
      assert.equal(cut.status, 504);
      assert.equal(cut.code, 'sidecar.upstream.outcome_unknown');
      // Kept before the store closed: not 409 until the deadline (119 s here), but the caller's own answer, replayed.
      const retry = await send(other.sidecar.egressUrl, key, payment);
      assert.equal(retry.status, 504, `${retry.status} ${retry.code ?? ''}`);
      assert.equal(retry.code, 'sidecar.upstream.outcome_unknown');
      assert.equal(retry.replayed, true);
      assert.ok(retry.body.equals(cut.body), 'the answer the caller got, byte for byte');
      assert.equal(stopping.logs.text.includes('idempotency.record_not_saved'), false);
      const copies = gateway.requests.filter((r) => r.body === gateway.requests[0]!.body);
      assert.equal(copies.length, 1, 'the payment reached the gateway once');
    } finally {
      await stopping.stop();
      await other?.stop();
      await gateway.stop();
    }
  });

  it('a keyed request answered draining (never sent) while its claim was in flight releases its key', async () => {
    const gateway = await new RecordingGateway().start();
    const stopping = await startTestSidecar(
      await sidecarEnv(keys, gateway.url, { ...fleetEnv(), SIDECAR_SHUTDOWN_MAX_DELAY_MS: '200' }),
    );
    let other: TestSidecar | undefined;
    try {
      await waitUntilReady(stopping.sidecar);
      const key = newKey();
      const payment = freshDeposit();
      // A Redis that answers nothing: the claim waits (within the 2 s command timeout) while shutdown's maximum
      // delay passes and the caller is answered draining.
      redis.freeze();
      const pending = send(stopping.sidecar.egressUrl, key, payment);
      await untilInFlight(stopping, 1); // the request reaches the handler
      const stopped = stopping.stop();
      const cut = await pending;
      redis.thaw(); // the claim succeeds now, for a request that will never be sent
      await stopped;
      assert.equal(cut.status, 503);
      assert.equal(cut.code, 'sidecar.shutdown.draining');
      assert.equal(cut.retryable, true);
      assert.equal(gateway.requests.length, 0, 'never sent');
      other = await replica(gateway.url);
      const retry = await send(other.sidecar.egressUrl, key, payment);
      assert.equal(retry.status, 201, `${retry.status} ${retry.code ?? ''}`);
      assert.equal(retry.replayed, false);
      assert.equal(gateway.requests.length, 1, 'sent once, by the retry');
    } finally {
      redis.thaw();
      await stopping.stop();
      await other?.stop();
      await gateway.stop();
    }
  });
});
