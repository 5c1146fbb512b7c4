import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { sidecarErrors } from '../../src/errors.js';
import { IdempotencyKeeper, type Claim } from '../../src/idempotency/keeper.js';
import { idempotencyKey, type IdempotencyKey } from '../../src/idempotency/key.js';
import { errorAnswer, type KeptAnswer } from '../../src/idempotency/record.js';
import { createLogger } from '../../src/observability/log.js';
import { StateStoreUnavailableError, type StateStore } from '../../src/state/state-store.js';
import { SwitchableStore } from '../support/failing-store.js';
import { CapturedOutput } from '../support/sidecar.js';
import { waitFor } from '../support/wait-for.js';

export const LONGEST_MS = 60_000;

/** A keeper on `store` whose wall clock the test moves. */
export function keeperOn(store: StateStore, logs = new CapturedOutput(), leaseMs = 5_000) {
  const clock = { now: Date.now() };
  const keeper = new IdempotencyKeeper({
    store,
    ttlMs: 3_600_000,
    claimDeadlineMs: LONGEST_MS,
    leaseMs,
    now: () => clock.now,
    log: createLogger('debug', logs),
  });
  return { keeper, clock, logs };
}

export const freshKey = (): IdempotencyKey => idempotencyKey(`key-${randomUUID()}`)!;

export const gatewayAnswer: KeptAnswer = {
  status: 201,
  headers: { 'content-type': 'application/json', 'x-gateway': 'kept' },
  body: Buffer.from('{"transaction_link":"https://pay.example/t/1","status":"PENDING"}'),
  code: 'ok',
};

function ticketOf(claim: Claim) {
  assert.equal(claim.kind, 'new');
  return claim.ticket;
}

/** The protocol, run against every StateStore implementation (memory and Redis, with records signed or not). */
export function describeKeeperContract(name: string, open: () => Promise<StateStore>): void {
  const keeperFor = (store: StateStore) => keeperOn(store);
  describe(`idempotency protocol on the ${name} store`, () => {
    let store: StateStore;
    before(async () => {
      store = await open();
    });
    after(async () => {
      await store.close();
    });

    it('first claim is new; the same request meanwhile is in_progress; another body is key_reused', async () => {
      const { keeper } = keeperFor(store);
      const key = freshKey();
      ticketOf(await keeper.claim(key, 'fp-a', 'req-1'));
      assert.deepEqual(await keeper.claim(key, 'fp-a', 'req-2'), { kind: 'in_progress' });
      assert.deepEqual(await keeper.claim(key, 'fp-b', 'req-3'), { kind: 'key_reused' });
    });

    it('a completed key replays the answer byte for byte, and stays key_reused for another body', async () => {
      const { keeper } = keeperFor(store);
      const key = freshKey();
      await keeper.complete(ticketOf(await keeper.claim(key, 'fp', 'req-1')), gatewayAnswer);
      const again = await keeper.claim(key, 'fp', 'req-2');
      assert.equal(again.kind, 'replayed');
      assert.deepEqual(again.kind === 'replayed' && again.answer, gatewayAnswer);
      assert.deepEqual(await keeper.claim(key, 'other', 'req-3'), { kind: 'key_reused' });
    });

    it('a released key (nothing was sent) can be claimed again', async () => {
      const { keeper } = keeperFor(store);
      const key = freshKey();
      await keeper.release(ticketOf(await keeper.claim(key, 'fp', 'req-1')));
      ticketOf(await keeper.claim(key, 'fp', 'req-2'));
    });

    it('of fifty concurrent claims of one key exactly one is new', async () => {
      const { keeper } = keeperFor(store);
      const key = freshKey();
      const claims = await Promise.all(Array.from({ length: 50 }, (_, i) => keeper.claim(key, 'fp', `req-${i}`)));
      assert.equal(claims.filter((c) => c.kind === 'new').length, 1);
      assert.equal(claims.filter((c) => c.kind === 'in_progress').length, 49);
    });

    it('an in_progress record past its deadline is answered outcome_unknown once and kept so', async () => {
      const { keeper, clock, logs } = keeperFor(store);
      const key = freshKey();
      const ticket = ticketOf(await keeper.claim(key, 'fp', 'req-dead'));
      clock.now += LONGEST_MS - 1;
      assert.deepEqual(await keeper.claim(key, 'fp', 'req-early'), { kind: 'in_progress' });
      clock.now += 2;
      const late = await keeper.claim(key, 'fp', 'req-late');
      const unknown = errorAnswer(sidecarErrors.outcomeUnknown(502, 'abandoned'));
      assert.deepEqual(late, { kind: 'abandoned', answer: unknown, owner: 'req-dead' });
      assert.deepEqual(await keeper.claim(key, 'fp', 'req-later'), { kind: 'replayed', answer: unknown });
      // The dead request's replica, had it lived on, cannot overwrite what retries were told.
      await keeper.complete(ticket, gatewayAnswer);
      assert.deepEqual(await keeper.claim(key, 'fp', 'req-last'), { kind: 'replayed', answer: unknown });
      assert.match(logs.text, /idempotency\.record_changed/);
    });

    it('a claim whose reply was lost (applied, then timed out) is refused and removed: the retry goes through', async () => {
      const switchable = new SwitchableStore(store);
      const { keeper } = keeperFor(switchable);
      const key = freshKey();
      switchable.loseNextSetReply = true;
      await assert.rejects(keeper.claim(key, 'fp', 'req-1'), StateStoreUnavailableError);
      ticketOf(await keeper.claim(key, 'fp', 'req-2'));
    });

    it('an unreachable store: claim rejects (nothing may be sent); complete and release never reject', async () => {
      const switchable = new SwitchableStore(store);
      const { keeper, clock, logs } = keeperFor(switchable);
      const key = freshKey();
      switchable.down = true;
      await assert.rejects(keeper.claim(key, 'fp', 'req-1'), StateStoreUnavailableError);
      switchable.down = false;
      const ticket = ticketOf(await keeper.claim(key, 'fp', 'req-2'));
      switchable.down = true;
      await keeper.complete(ticket, gatewayAnswer);
      assert.equal((logs.text.match(/idempotency\.record_not_saved/g) ?? []).length, 1);
      switchable.down = false;
      // The record stayed in_progress: never "send it", outcome_unknown once its deadline has passed.
      assert.deepEqual(await keeper.claim(key, 'fp', 'req-3'), { kind: 'in_progress' });
      clock.now += LONGEST_MS + 1;
      assert.equal((await keeper.claim(key, 'fp', 'req-4')).kind, 'abandoned');
    });

    it('a release the store did not take is taken once it answers: the next request with the key is sent, not 409', async () => {
      const switchable = new SwitchableStore(store);
      const { keeper, logs } = keeperFor(switchable);
      const key = freshKey();
      const ticket = ticketOf(await keeper.claim(key, 'fp', 'req-1'));
      switchable.down = true;
      await keeper.release(ticket);
      assert.equal((logs.text.match(/idempotency\.record_not_saved/g) ?? []).length, 1);
      // Still away: the retry is refused as the store is (503, nothing sent), not answered in_progress.
      await assert.rejects(keeper.claim(key, 'fp', 'req-2'), StateStoreUnavailableError);
      switchable.down = false;
      assert.equal((await keeper.claim(key, 'fp', 'req-3')).kind, 'new', 'the earlier claim released first');
    });

    it('a release the store did not take is tried again in the background: another replica then claims the key', async () => {
      const switchable = new SwitchableStore(store);
      const { keeper } = keeperFor(switchable);
      const key = freshKey();
      const ticket = ticketOf(await keeper.claim(key, 'fp', 'req-1'));
      switchable.down = true;
      await keeper.release(ticket);
      await sleep(150); // one retry while still away
      switchable.down = false;
      const other = keeperFor(store).keeper;
      await waitFor('the release taken', async () => (await store.get(ticket.storeKey)) === undefined, 3_000);
      assert.equal((await other.claim(key, 'fp', 'req-2')).kind, 'new');
    });
  });
}
