// A replica that dies or stalls while it holds a payment's Idempotency-Key, with real `serve` processes on one real
// Redis: the claim's lease runs out within seconds, and a retry on another replica then knows from the record's
// stage whether the payment may have left (`sending`: outcome_unknown at once) or certainly did not (`claimed`: it
// takes the claim over and sends the payment itself, once). The gateway counts the copies of each payment.
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { after, afterEach, before, describe, it } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { freshDeposit, newKey, send, type Reply } from '../support/idempotent-calls.js';
import { makeKeys, type TestKeys } from '../support/keys.js';
import { RecordingGateway } from '../support/recording-gateway.js';
import { startRedis, type TestRedis } from '../support/redis-server.js';
import { sidecarEnv } from '../support/sidecar.js';
import { spawnSidecar, type SpawnedSidecar } from '../support/spawned-sidecar.js';
import { waitFor } from '../support/wait-for.js';

const LEASE_MS = 2_000;
/** The lease has surely run out in Redis this long after its holder's last renewal (a loaded machine's margin). */
const PAST_LEASE_MS = LEASE_MS + 700;

let redis: TestRedis;
let keys: TestKeys;
let gateway: RecordingGateway;
/** Two replicas that stay up: where callers retry. */
let survivors: SpawnedSidecar[] = [];
/** The replica each test kills or pauses. */
let doomed: SpawnedSidecar | undefined;

async function replica(extra: NodeJS.ProcessEnv = {}): Promise<SpawnedSidecar> {
  const env = await sidecarEnv(keys, gateway.url, {
    SIDECAR_STATE_STORE: 'redis',
    SIDECAR_REDIS_URL: redis.url,
    // Room for three processes on a loaded test machine; the lease stays over twice this.
    SIDECAR_REDIS_COMMAND_TIMEOUT_MS: '500',
    SIDECAR_IDEMPOTENCY_LEASE_MS: String(LEASE_MS),
    SIDECAR_LOG_LEVEL: 'info',
    ...extra,
  });
  const spawned = await spawnSidecar(env, 30_000);
  try {
    await waitFor('ready', async () => (await fetch(`${spawned.adminUrl}/readyz`)).status === 200, 20_000);
  } catch (err) {
    await spawned.kill();
    throw err;
  }
  return spawned;
}

before(async () => {
  [redis, keys] = await Promise.all([startRedis(), makeKeys()]);
  gateway = await new RecordingGateway().start();
  survivors = [await replica(), await replica()];
});
afterEach(async () => {
  doomed?.child.kill('SIGCONT');
  await doomed?.kill();
  doomed = undefined;
  gateway.holdUntil = 0;
  gateway.release();
});
after(async () => {
  await Promise.all(survivors.map((s) => s.kill()));
  await gateway.stop();
  await redis.close();
});

/** The copies of `payment` the gateway received: its envelope carries the caller's exact bytes as base64. */
const copiesOf = (payment: string): number => {
  const data = Buffer.from(payment).toString('base64');
  return gateway.requests.filter((r) => r.body.includes(data)).length;
};

/** The key's record as Redis holds it (its stage), once it exists. */
async function recordOf(key: string): Promise<string> {
  const sha = createHash('sha256').update(key).digest('hex');
  const [name] = await redis.cli('--scan', '--pattern', `*:idempotency:${sha}`);
  return name === undefined ? '' : ((await redis.cli('GET', name))[0] ?? '');
}

/** Retries on `proxyUrl` every 100 ms while the answer is 409 in_progress (the holder may still live). */
async function retryWhileInProgress(proxyUrl: string, key: string, payment: string, ms = 15_000): Promise<Reply> {
  const deadline = Date.now() + ms;
  for (;;) {
    const reply = await send(proxyUrl, key, payment);
    if (reply.code !== 'sidecar.idempotency.in_progress' || Date.now() > deadline) return reply;
    await sleep(100);
  }
}

/**
 * A doomed replica with one gateway connection, held by another payment the gateway does not answer: the keyed
 * payment then waits for a connection, its key `claimed` and nothing sent.
 */
async function claimedWaitingForAConnection(
  key: string,
  payment: string,
): Promise<{ pending: Promise<Reply | Error> }> {
  gateway.holdUntil = Number.POSITIVE_INFINITY;
  doomed = await replica({ SIDECAR_UPSTREAM_CONNECTIONS: '1' });
  const blocker = freshDeposit();
  void send(doomed.proxyUrl, undefined, blocker).catch(() => undefined);
  await waitFor('the blocker at the gateway', () => copiesOf(blocker) === 1);
  const pending = send(doomed.proxyUrl, key, payment).catch((err: unknown) => err as Error);
  await waitFor('the claim', async () => (await recordOf(key)).includes('"stage":"claimed"'), 10_000);
  return { pending };
}

describe('a replica that dies or stalls holding a key (lease, recovery point, takeover)', () => {
  it('killed while the gateway holds the payment: a retry elsewhere gets outcome_unknown within the lease plus a second; one copy', async () => {
    gateway.holdUntil = Number.POSITIVE_INFINITY;
    doomed = await replica();
    const key = newKey();
    const payment = freshDeposit();
    const lost = send(doomed.proxyUrl, key, payment).catch((err: unknown) => err);
    await waitFor('the payment at the gateway', () => copiesOf(payment) === 1);
    assert.match(await recordOf(key), /"stage":"sending"/);
    doomed.child.kill('SIGKILL');
    const killedAt = Date.now();
    await doomed.exited;
    assert.ok((await lost) instanceof Error, 'the caller of the killed replica got no answer');
    const retry = await retryWhileInProgress(survivors[0]!.proxyUrl, key, payment);
    const tookMs = Date.now() - killedAt;
    assert.equal(retry.status, 502, `${retry.status} ${retry.code ?? ''}`);
    assert.equal(retry.code, 'sidecar.upstream.outcome_unknown');
    assert.equal(retry.retryable, false);
    assert.ok(tookMs <= LEASE_MS + 1_000, `answered ${tookMs} ms after the kill`);
    const again = await send(survivors[1]!.proxyUrl, key, payment);
    assert.ok(again.replayed && again.body.equals(retry.body), 'later retries replay it');
    assert.equal(copiesOf(payment), 1, 'never resent');
  });

  it('killed before it sent (waiting for a connection): a retry elsewhere takes the claim over, sends it, 201; one copy', async () => {
    const key = newKey();
    const payment = freshDeposit();
    const { pending } = await claimedWaitingForAConnection(key, payment);
    doomed!.child.kill('SIGKILL');
    await doomed!.exited;
    assert.ok((await pending) instanceof Error, 'the caller of the killed replica got no answer');
    gateway.holdUntil = 0;
    const retry = await retryWhileInProgress(survivors[0]!.proxyUrl, key, payment);
    assert.equal(retry.status, 201, `${retry.status} ${retry.code ?? ''}`);
    assert.equal(retry.replayed, false, "the gateway's own answer to the copy the retry sent");
    assert.equal(copiesOf(payment), 1, 'sent once, by the retry');
    const again = await send(survivors[1]!.proxyUrl, key, payment);
    assert.ok(again.replayed && again.body.equals(retry.body));
    assert.equal(copiesOf(payment), 1);
  });

  it('two retries racing for one dead claim: one takes it over, the other gets 409; one copy', async () => {
    const key = newKey();
    const payment = freshDeposit();
    const { pending } = await claimedWaitingForAConnection(key, payment);
    doomed!.child.kill('SIGKILL');
    await doomed!.exited;
    await pending;
    await sleep(PAST_LEASE_MS);
    // The winner's copy is held at the gateway, so the loser meets a live claim whatever the order.
    const racing = survivors.map((s) => send(s.proxyUrl, key, payment));
    await waitFor('the winner at the gateway', () => copiesOf(payment) === 1, 10_000);
    const loser = await Promise.race(racing);
    gateway.release();
    const replies = await Promise.all(racing);
    assert.equal(loser.status, 409, `${loser.status} ${loser.code ?? ''}`);
    assert.deepEqual(replies.map((r) => `${r.status} ${r.code ?? ''}`).sort(), [
      '201 ',
      '409 sidecar.idempotency.in_progress',
    ]);
    assert.equal(copiesOf(payment), 1, 'never two sends');
  });

  it('paused past its lease before it sent: a retry takes over and sends; resumed, the paused replica sends nothing and answers claim_lost', async () => {
    const key = newKey();
    const payment = freshDeposit();
    const { pending } = await claimedWaitingForAConnection(key, payment);
    doomed!.child.kill('SIGSTOP');
    await sleep(PAST_LEASE_MS);
    gateway.holdUntil = 0;
    const retry = await retryWhileInProgress(survivors[0]!.proxyUrl, key, payment);
    assert.equal(retry.status, 201, `${retry.status} ${retry.code ?? ''}`);
    assert.equal(copiesOf(payment), 1);
    // Resumed: its connection is freed (the blocker's answer was released with the retry's), its fence fails.
    doomed!.child.kill('SIGCONT');
    const resumed = await pending;
    assert.ok(!(resumed instanceof Error), resumed instanceof Error ? resumed.message : '');
    assert.equal(resumed.status, 409, `${resumed.status} ${resumed.body.toString()}`);
    assert.equal(resumed.code, 'sidecar.idempotency.claim_lost');
    assert.equal(resumed.retryable, true);
    assert.equal(resumed.headers.get('retry-after'), '1');
    await sleep(500); // anything it might still send would have arrived by now
    assert.equal(copiesOf(payment), 1, 'the paused replica never sent its copy');
    const metrics = await (await fetch(`${doomed!.adminUrl}/metrics`)).text();
    assert.match(
      metrics,
      /^signing_sidecar_idempotency_total\{outcome="claim_lost"\} 1$/m,
      'counted as lost at the fence',
    );
    const later = await send(doomed!.proxyUrl, key, payment);
    assert.ok(later.replayed && later.body.equals(retry.body), "its caller's retry gets the retry's answer");
  });

  it("paused past its lease while the gateway held its payment: the takeover's outcome_unknown stands; the late answer does not overwrite it", async () => {
    gateway.holdUntil = Number.POSITIVE_INFINITY;
    doomed = await replica();
    const key = newKey();
    const payment = freshDeposit();
    const pending = send(doomed.proxyUrl, key, payment).catch((err: unknown) => err as Error);
    await waitFor('the payment at the gateway', () => copiesOf(payment) === 1);
    doomed.child.kill('SIGSTOP');
    await sleep(PAST_LEASE_MS);
    const retry = await retryWhileInProgress(survivors[0]!.proxyUrl, key, payment);
    assert.equal(retry.code, 'sidecar.upstream.outcome_unknown', `${retry.status} ${retry.code ?? ''}`);
    gateway.release(); // the gateway's answer reaches the paused replica's socket
    doomed.child.kill('SIGCONT');
    const late = await pending;
    assert.ok(!(late instanceof Error), late instanceof Error ? late.message : '');
    // Its own caller, still waiting, gets what the gateway said; the key keeps what the retry was told.
    assert.equal(late.status, 201, `${late.status} ${late.code ?? ''}`);
    await waitFor('the late answer refused', () => doomed!.output().stdout.includes('idempotency.record_changed'));
    for (const proxy of [survivors[1]!, doomed, survivors[0]!]) {
      const again = await send(proxy.proxyUrl, key, payment);
      assert.equal(again.code, 'sidecar.upstream.outcome_unknown');
      assert.ok(again.replayed && again.body.equals(retry.body), 'one story for every later retry');
    }
    assert.equal(copiesOf(payment), 1);
  });
});
