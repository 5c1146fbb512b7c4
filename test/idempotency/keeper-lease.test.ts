// The claim's lease and its one recovery point, `sending`, on a real Redis: what a retry does with a claim whose
// holder stopped renewing it, and what the holder can still do once it comes back.
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { sidecarErrors } from '../../src/errors.js';
import type { Claim, IdempotencyKeeper, Ticket } from '../../src/idempotency/keeper.js';
import { decodeRecord, encodeRecord, errorAnswer } from '../../src/idempotency/record.js';
import { accountTag } from '../../src/state/redis-keys.js';
import { RedisStateStore } from '../../src/state/redis-store.js';
import type { Condition, Write, WriteOptions } from '../../src/state/state-store.js';
import { SwitchableStore } from '../support/failing-store.js';
import { startRedis, type TestRedis } from '../support/redis-server.js';
import { freshKey, gatewayAnswer, keeperOn, LONGEST_MS } from './keeper-contract.js';

/** Renewed every 200 ms: only a stall of some 400 ms on a loaded machine would let a live holder's lease lapse. */
const LEASE_MS = 600;
/** Past the lease with room for a loaded machine's timers. */
const PAST_LEASE_MS = LEASE_MS + 400;

let redis: TestRedis;
let shared: RedisStateStore;
before(async () => {
  redis = await startRedis();
  shared = new RedisStateStore({
    topology: { mode: 'standalone', url: redis.url },
    accountTag: accountTag('https://gateway.test', 'lease@example.test'),
    commandTimeoutMs: 200,
  });
  assert.equal(await shared.whenAvailable(5_000), true, 'the store connects');
});
after(async () => {
  await shared.close();
  await redis.close();
});

/** A replica: its own keeper, reaching the shared Redis through a switch that can cut it off. */
function replica(): { keeper: IdempotencyKeeper; link: SwitchableStore } {
  const link = new SwitchableStore(shared);
  return { keeper: keeperOn(link, undefined, LEASE_MS).keeper, link };
}

function ticketOf(claim: Claim): Ticket {
  assert.equal(claim.kind, 'new');
  return claim.ticket;
}

const stageOf = async (ticket: Ticket): Promise<string | undefined> => {
  const record = decodeRecord((await shared.get(ticket.storeKey))!);
  return record.state === 'in_progress' ? record.stage : record.state;
};

/**
 * Orders one race the way an acknowledged write's WAIT lets it happen: a lease renewal finds the lease gone, the
 * claim's move to `sending` is applied next, and only then does the renewal's rewrite (conditional on `claimed`) run;
 * the move's reply (its WAIT) comes back after that rewrite has been refused.
 */
function latch(): { promise: Promise<void>; resolve: () => void } {
  let resolve = (): void => undefined;
  const promise = new Promise<void>((done) => (resolve = done));
  return { promise, resolve };
}

class RenewalRacingTheFence extends SwitchableStore {
  racing = false;
  private renewalLookedUp = latch();
  private fenceApplied = latch();
  private rewriteAnswered = latch();

  override async compareAndSet(key: string, expected: string | undefined, value: string, ttlMs: number) {
    const renewed = await super.compareAndSet(key, expected, value, ttlMs);
    if (this.racing && !renewed) this.renewalLookedUp.resolve();
    return renewed;
  }

  override async writeIf(conditions: readonly Condition[], writes: readonly Write[], options?: WriteOptions) {
    if (!this.racing) return super.writeIf(conditions, writes, options);
    const leaseOnly = writes.every((write) => write.key.includes(':lease:'));
    if (leaseOnly) {
      await this.fenceApplied.promise;
      const rewritten = await super.writeIf(conditions, writes, options);
      this.rewriteAnswered.resolve();
      return rewritten;
    }
    await this.renewalLookedUp.promise;
    const moved = await super.writeIf(conditions, writes, options);
    this.fenceApplied.resolve();
    // The WAIT: back once the renewal's rewrite was answered, or after a while if the renewal did not rewrite.
    await Promise.race([this.rewriteAnswered.promise, sleep(3 * LEASE_MS)]);
    await sleep(20);
    return moved;
  }
}

const unknown = errorAnswer(sidecarErrors.outcomeUnknown(502, 'abandoned'));

describe('the claim lease and the sending recovery point (Redis)', () => {
  it('a live holder renews its lease: a retry long after it is still 409 in_progress, in either stage', async () => {
    const holder = replica();
    const key = freshKey();
    const ticket = ticketOf(await holder.keeper.claim(key, 'fp', 'req-1'));
    assert.equal(await stageOf(ticket), 'claimed');
    await sleep(3 * LEASE_MS);
    assert.deepEqual(await replica().keeper.claim(key, 'fp', 'req-2'), { kind: 'in_progress' });
    await holder.keeper.markSending(ticket);
    assert.equal(await stageOf(ticket), 'sending');
    await sleep(3 * LEASE_MS);
    assert.deepEqual(await replica().keeper.claim(key, 'fp', 'req-3'), { kind: 'in_progress' });
    await holder.keeper.complete(ticket, gatewayAnswer);
    assert.deepEqual(await replica().keeper.claim(key, 'fp', 'req-4'), { kind: 'replayed', answer: gatewayAnswer });
  });

  it('the fence is written once: a resend (after 401 FAILED) passes it without a store command', async () => {
    const holder = replica();
    const ticket = ticketOf(await holder.keeper.claim(freshKey(), 'fp', 'req-1'));
    await holder.keeper.markSending(ticket);
    const calls = holder.link.calls;
    await holder.keeper.markSending(ticket);
    assert.equal(holder.link.calls, calls);
    await holder.keeper.complete(ticket, gatewayAnswer);
  });

  it('a dead holder that sent nothing (claimed): a retry takes the claim over and may send; the old holder cannot', async () => {
    const holder = replica();
    const key = freshKey();
    const stale = ticketOf(await holder.keeper.claim(key, 'fp', 'req-dead'));
    holder.link.down = true; // cut off: its renewals fail, its lease runs out in Redis
    await sleep(PAST_LEASE_MS);
    const retry = replica();
    const taken = await retry.keeper.claim(key, 'fp', 'req-retry');
    assert.equal(taken.kind, 'new');
    assert.equal(taken.kind === 'new' && taken.tookOverFrom, 'req-dead');
    const ticket = ticketOf(taken);
    assert.equal(await stageOf(ticket), 'claimed');
    // The old holder comes back: its fence is a compare-and-set on its own claim, which is gone.
    holder.link.down = false;
    await assert.rejects(holder.keeper.markSending(stale), { code: 'sidecar.idempotency.claim_lost' });
    await holder.keeper.release(stale); // deletes nothing of the new claim
    await retry.keeper.markSending(ticket);
    await retry.keeper.complete(ticket, gatewayAnswer);
    assert.deepEqual(await replica().keeper.claim(key, 'fp', 'req-later'), { kind: 'replayed', answer: gatewayAnswer });
  });

  it('a dead holder that may have sent (sending): outcome_unknown at once, kept; its late answer does not overwrite it', async () => {
    const holder = replica();
    const key = freshKey();
    const ticket = ticketOf(await holder.keeper.claim(key, 'fp', 'req-dead'));
    await holder.keeper.markSending(ticket);
    holder.link.down = true;
    await sleep(PAST_LEASE_MS);
    const retry = await replica().keeper.claim(key, 'fp', 'req-retry');
    assert.deepEqual(retry, { kind: 'abandoned', answer: unknown, owner: 'req-dead' });
    holder.link.down = false;
    // A resend after a 401 FAILED, once back: its lease lapsed and the record is no longer its own.
    await assert.rejects(holder.keeper.markSending(ticket), { code: 'sidecar.idempotency.claim_lost' });
    await holder.keeper.complete(ticket, gatewayAnswer);
    assert.deepEqual(await replica().keeper.claim(key, 'fp', 'req-later'), { kind: 'replayed', answer: unknown });
  });

  it('of two retries racing for one dead claim, one takes it over and the other is 409 in_progress', async () => {
    for (let round = 0; round < 5; round++) {
      const holder = replica();
      const key = freshKey();
      ticketOf(await holder.keeper.claim(key, 'fp', 'req-dead'));
      holder.link.down = true;
      await sleep(PAST_LEASE_MS);
      const claims = await Promise.all([
        replica().keeper.claim(key, 'fp', 'req-a'),
        replica().keeper.claim(key, 'fp', 'req-b'),
      ]);
      assert.deepEqual(claims.map((c) => c.kind).sort(), ['in_progress', 'new']);
    }
  });

  it('a holder paused past its lease that nobody took over keeps its claim: its fence passes and renews the lease', async () => {
    const holder = replica();
    const key = freshKey();
    const ticket = ticketOf(await holder.keeper.claim(key, 'fp', 'req-1'));
    holder.link.down = true;
    await sleep(PAST_LEASE_MS);
    holder.link.down = false;
    await holder.keeper.markSending(ticket);
    assert.equal(await stageOf(ticket), 'sending');
    assert.deepEqual(await replica().keeper.claim(key, 'fp', 'req-2'), { kind: 'in_progress' });
    await holder.keeper.complete(ticket, gatewayAnswer);
  });

  it("a renewal that meets the claim's own move to sending (its WAIT still out) does not give the claim up", async () => {
    const link = new RenewalRacingTheFence(shared);
    const holder = keeperOn(link, undefined, LEASE_MS).keeper;
    const key = freshKey();
    const ticket = ticketOf(await holder.claim(key, 'fp', 'req-1'));
    // Paused past its lease, nobody took over: the lease key is gone, the record still this claim's.
    link.down = true;
    await sleep(PAST_LEASE_MS);
    link.down = false;
    link.racing = true;
    await holder.markSending(ticket);
    link.racing = false;
    assert.equal(await stageOf(ticket), 'sending');
    // Its lease is still renewed: a retry long after is 409, not a dead holder's outcome_unknown.
    await sleep(3 * LEASE_MS);
    assert.deepEqual(await replica().keeper.claim(key, 'fp', 'req-2'), { kind: 'in_progress' });
    // And a resend after 401 FAILED still passes the fence.
    await holder.markSending(ticket);
    await holder.complete(ticket, gatewayAnswer);
    assert.deepEqual(await replica().keeper.claim(key, 'fp', 'req-3'), { kind: 'replayed', answer: gatewayAnswer });
  });

  it('a record written without a stage (an older sidecar, no lease) stays in progress until its deadline', async () => {
    const key = freshKey();
    const storeKey = `idempotency:${key.sha256}`;
    const { keeper, clock } = keeperOn(shared, undefined, LEASE_MS);
    const deadline = clock.now + LONGEST_MS;
    const old = encodeRecord({ state: 'in_progress', fingerprint: 'fp', owner: 'req-old', deadline, claim: 'c1' });
    await shared.setIfAbsent(storeKey, old, 600_000);
    await sleep(PAST_LEASE_MS);
    assert.deepEqual(await keeper.claim(key, 'fp', 'req-2'), { kind: 'in_progress' });
    clock.now += LONGEST_MS + 1;
    assert.deepEqual(await keeper.claim(key, 'fp', 'req-3'), { kind: 'abandoned', answer: unknown, owner: 'req-old' });
  });

  it('the store silent at the fence: 503 unavailable, nothing may be sent; release frees the key', async () => {
    const holder = replica();
    const key = freshKey();
    const ticket = ticketOf(await holder.keeper.claim(key, 'fp', 'req-1'));
    holder.link.down = true;
    await assert.rejects(holder.keeper.markSending(ticket), { code: 'sidecar.idempotency.unavailable' });
    holder.link.down = false;
    await holder.keeper.release(ticket);
    ticketOf(await replica().keeper.claim(key, 'fp', 'req-2'));
  });
});
