import { randomBytes } from 'node:crypto';
import { errorName, sidecarErrors } from '../errors.js';
import type { Logger } from '../observability/log.js';
import { StateStoreUnavailableError, type Condition, type StateStore, type Write } from '../state/state-store.js';
import { backoffDelayMs } from '../token/backoff.js';
import { LEASE_VALUE, leaseKeyOf, ProcessLease, StoreLease, type Lease } from './claim-lease.js';
import type { IdempotencyKey } from './key.js';
import {
  decodeRecord,
  encodeRecord,
  errorAnswer,
  type DoneRecord,
  type InProgressRecord,
  type KeptAnswer,
} from './record.js';

export interface KeeperOptions {
  readonly store: StateStore;
  /** SIDECAR_IDEMPOTENCY_TTL_SECONDS, in ms: how long an answer is kept once recorded. */
  readonly ttlMs: number;
  /** claimDeadlineMs() (deadline.ts): an in_progress record older than this is abandoned. */
  readonly claimDeadlineMs: number;
  /**
   * SIDECAR_IDEMPOTENCY_LEASE_MS: how long a claim stands once its holder stops renewing it (renewed every third of
   * it). A claim whose lease ran out belongs to a dead, paused or cut-off replica.
   */
  readonly leaseMs: number;
  /** Wall clock (Unix ms): deadlines are compared across replicas. */
  readonly now: () => number;
  readonly log: Logger;
}

/**
 * This request holds the key: it must pass markSending before each copy is sent, and complete (an answer) or release
 * (nothing was sent) its record.
 */
export interface Ticket {
  readonly storeKey: string;
  readonly keySha256: string;
  readonly fingerprint: string;
  /** The exact `claimed` value written: it names this claim, and no other claim of the key ever has it. */
  readonly value: string;
}

/**
 * What a claim found. Only `new` sends; every other kind answers without reaching the gateway. `tookOverFrom`: the
 * key was a dead holder's claim that had sent nothing (its lease ran out while `claimed`), now this request's.
 */
export type Claim =
  | { readonly kind: 'new'; readonly ticket: Ticket; readonly tookOverFrom?: string }
  | { readonly kind: 'replayed'; readonly answer: KeptAnswer }
  /** An in_progress record past its deadline, now recorded as outcome_unknown; `owner` is the request that died. */
  | { readonly kind: 'abandoned'; readonly answer: KeptAnswer; readonly owner: string }
  | { readonly kind: 'in_progress' }
  | { readonly kind: 'key_reused' }
  /**
   * The record fails its MAC: someone wrote it under the prefix, or it was moved from another key. It is not
   * replayed, and nothing is sent either: it may stand in for a real payment's record.
   */
  | { readonly kind: 'unverified' };

/**
 * Answers are written acknowledged: a Redis failover to a replica that had not received one would forget it, and a
 * retry would find the key's `sending` record and get outcome_unknown instead of its answer.
 */
const ACKNOWLEDGED = { acknowledged: true, refusedBlocks: true } as const;
/**
 * A claim is pinned: the memory store never evicts it while its request may be at the gateway (evicted, a retry
 * after the local claim's deadline would be sent again), and refuses a new one when claims alone fill it: a 503 with
 * nothing sent. The answer that replaces it is not pinned: answers are what the store evicts, oldest first. A claim is
 * not acknowledged: nothing is sent on it until the move to `sending`, which is (SENDING). A claim a failover forgets
 * lets a retry claim the key elsewhere; this request then fails that move (`claim_lost`, nothing sent), so one copy
 * is sent, and a stall of the replicas costs keyed payments one `WAIT` each, not two.
 */
const CLAIM = { pinned: true, refusedBlocks: true } as const;
/**
 * The move to `sending`, right before the first byte, is the fence: only over this request's own claim, and counted
 * only once the replicas hold it (with the claim it was written over, which came before it in the primary's
 * replication stream). A failover then either keeps it, or forgets it and refuses this request: never both copies.
 */
const SENDING = { acknowledged: true, pinned: true, refusedBlocks: true } as const;

/** A few rounds absorb a record that changes between two store calls; past them the key is busy. */
const CLAIM_ROUNDS = 4;
/** A release the store did not take is tried again after a backoff from this, up to RELEASE_RETRY_MAX_MS. */
const RELEASE_RETRY_FIRST_MS = 100;
const RELEASE_RETRY_MAX_MS = 1_000;

/** One of this replica's claims, from its claim to its last write. */
interface LocalClaim {
  readonly fingerprint: string;
  readonly deadline: number;
  /** The ticket's in_progress value: only its own complete or release ends it. */
  readonly value: string;
}

/** What this replica knows of one of its claims while it holds it: the record as last written, and the lease. */
interface Hold {
  /** As last written: its stage says whether the fence was passed. */
  record: InProgressRecord;
  /** The value the record holds now, as far as this replica wrote it: the fencing token of every later write. */
  current: string;
  /** Values a write that timed out may have left instead (release tries them too). */
  readonly uncertain: string[];
  /**
   * While the move to `sending` is on its way: a lease renewal refused meanwhile may have met that very move
   * (`current` changes only once its acknowledged write returns), so it must not call the lease lost.
   */
  moving: boolean;
  readonly lease: Lease;
}

/**
 * The idempotency protocol on the state store, one record per key at `idempotency:<sha256 of key>`
 * (docs/idempotency.md, "States"): claim writes it `claimed` with its lease; markSending moves it to `sending`
 * right before the first byte goes to the gateway, by compare-and-set on the claim's own value (a fencing token);
 * complete moves it to `done`; release deletes it when nothing reached the gateway. A retry that finds a claim
 * whose lease ran out takes it over when it is still `claimed` (nothing was sent) and records outcome_unknown when
 * it is `sending`. Each step is one atomic store command, so two replicas racing for one key cannot both send.
 */
export class IdempotencyKeeper {
  /**
   * This replica's own claims still in flight, by store key. The store can lose a record while its request is at
   * the gateway (the memory store evicts its oldest entries when full; a Redis restarts empty or fails over): a
   * retry that reaches this replica meanwhile is still answered from here, never sent a second time.
   */
  private readonly inFlight = new Map<string, LocalClaim>();
  /** Releases the store did not take, by store key, tried again until taken (releaseLater). */
  private readonly pendingReleases = new Map<string, () => Promise<void>>();
  /** The claim behind each ticket still held (weak: a ticket never settled takes its hold with it). */
  private readonly holds = new WeakMap<Ticket, Hold>();
  constructor(private readonly options: KeeperOptions) {}

  /** Rejects with StateStoreUnavailableError when the store cannot answer: the caller then must not send. */
  async claim(key: IdempotencyKey, fingerprint: string, owner: string): Promise<Claim> {
    const { store, now } = this.options;
    const storeKey = `idempotency:${key.sha256}`;
    const local = this.localClaim(storeKey);
    if (local !== undefined)
      return local.fingerprint === fingerprint ? { kind: 'in_progress' } : { kind: 'key_reused' };
    // An earlier request's release not yet taken: taken now, or the store is still away (thrown: 503, nothing sent).
    await this.pendingReleases.get(storeKey)?.();
    for (let round = 0; round < CLAIM_ROUNDS; round++) {
      const mine = this.newRecord(fingerprint, owner);
      const value = encodeRecord(mine);
      const writtenAt = performance.now();
      if (await this.setClaim(storeKey, mine, value)) {
        return { kind: 'new', ticket: this.hold(key, storeKey, mine, value, writtenAt) };
      }
      const read = await store.read(storeKey);
      if (read.found === 'none') continue; // released or expired between the two calls: claim again
      // Refused by its MAC (the store counted and logged it): neither replayed nor sent again.
      if (read.found === 'refused') return { kind: 'unverified' };
      const found = read.value;
      const record = decodeRecord(found);
      if (record.fingerprint !== fingerprint) return { kind: 'key_reused' };
      if (record.state === 'done') return { kind: 'replayed', answer: record.answer };
      const seen = await this.holderSeen(storeKey, record);
      if (seen.dead && record.stage === 'claimed') {
        const taken = await this.takeOver(key, storeKey, found, record, seen.leaseKey, owner);
        if (taken !== undefined) return taken;
        continue;
      }
      const abandoned = record.deadline <= now() || (seen.dead && record.stage === 'sending');
      if (!abandoned) return { kind: 'in_progress' };
      // Its replica died (or lost the store) after it may have sent: never resend, record outcome_unknown. Before
      // the deadline only while the lease is still gone: a holder that came back and renewed it keeps its claim.
      const answer = errorAnswer(sidecarErrors.outcomeUnknown(502, 'abandoned'));
      const done = encodeRecord({ state: 'done', fingerprint, answer });
      const conditions: Condition[] = [{ key: storeKey, holds: found }];
      if (record.deadline > now() && seen.leaseKey !== undefined)
        conditions.push({ key: seen.leaseKey, holds: undefined });
      const write = { key: storeKey, value: done, ttlMs: this.options.ttlMs };
      if (await store.writeIf(conditions, [write], ACKNOWLEDGED)) {
        return { kind: 'abandoned', answer, owner: record.owner };
      }
    }
    return { kind: 'in_progress' };
  }

  /**
   * Records the answer the caller got. Never rejects: the caller gets its answer whatever the store does. A record
   * left `sending` reads as outcome_unknown once its lease ran out (never as "send it"); one left `claimed` had sent
   * nothing, and a retry may take it over.
   */
  async complete(ticket: Ticket, answer: KeptAnswer): Promise<void> {
    const done = encodeRecord({ state: 'done', fingerprint: ticket.fingerprint, answer } satisfies DoneRecord);
    const { store, ttlMs } = this.options;
    const current = this.holds.get(ticket)?.current ?? ticket.value;
    await this.guard(ticket, 'complete', async () => {
      if (await store.compareAndSet(ticket.storeKey, current, done, ttlMs, ACKNOWLEDGED)) return true;
      // Evicted or expired meanwhile: written back, or a retry would be sent again. Anything else that holds the
      // key now (a retry's claim after a takeover, outcome_unknown recorded for a lapsed lease) is left as it is:
      // a late answer never overwrites what a retry was told.
      return store.setIfAbsent(ticket.storeKey, done, ttlMs, ACKNOWLEDGED);
    });
  }

  /** Deletes this claim's record: nothing reached the gateway, so a retry with the key must go through. */
  async release(ticket: Ticket): Promise<void> {
    const hold = this.holds.get(ticket);
    const values = hold === undefined ? [ticket.value] : [hold.current, ...hold.uncertain];
    const deleteOwn = () => this.deleteOwn(ticket.storeKey, values);
    await this.guard(ticket, 'release', deleteOwn, () => this.releaseLater(ticket.storeKey, deleteOwn));
  }

  /** Deletes the key where it holds one of this claim's values; false when it holds none of them. */
  private async deleteOwn(storeKey: string, values: readonly string[]): Promise<boolean> {
    for (const value of values) if (await this.options.store.compareAndDelete(storeKey, value)) return true;
    return false;
  }

  /**
   * A release the store did not take (a Redis stall, a lost connection): tried again, backing off, until it is taken
   * or the claim's deadline passes. Left until its lease ran out, the claim would answer every retry of the key 409
   * for nothing (nothing was sent), and one whose move to `sending` may have been applied would read as
   * outcome_unknown after it. A retry of the key on this replica first tries it at once (claim()).
   */
  private releaseLater(storeKey: string, deleteOwn: () => Promise<boolean>): void {
    const giveUpAt = performance.now() + this.options.claimDeadlineMs;
    const attempt = async (): Promise<void> => {
      await deleteOwn();
      this.pendingReleases.delete(storeKey);
    };
    this.pendingReleases.set(storeKey, attempt);
    const retry = (failures: number): void => {
      setTimeout(
        () => {
          if (this.pendingReleases.get(storeKey) !== attempt) return;
          attempt().catch(() => {
            if (performance.now() < giveUpAt) retry(failures + 1);
            else if (this.pendingReleases.get(storeKey) === attempt) this.pendingReleases.delete(storeKey);
          });
        },
        backoffDelayMs(failures, RELEASE_RETRY_FIRST_MS, RELEASE_RETRY_MAX_MS),
      ).unref();
    };
    retry(0);
  }

  /**
   * The fence before a copy of the request goes to the gateway: called with a connection in hand and the request
   * signed. The first time, the record moves from `claimed` to `sending` by compare-and-set on this claim's value,
   * acknowledged where acknowledged writes are configured, renewing the lease: a claim taken over while this replica
   * was paused or cut off fails here, and nothing is sent. Later copies (a resend after 401 FAILED or a connection
   * that failed) need no write, since no other request ever sends a `sending` key: they only check that the lease
   * still stands here, asking the store once when it lapsed. Throws 409 claim_lost, or 503 unavailable when the
   * store does not answer; either way nothing may be sent.
   */
  async markSending(ticket: Ticket): Promise<void> {
    const hold = this.holds.get(ticket);
    if (hold === undefined || hold.lease.isLost) throw sidecarErrors.idempotencyClaimLost();
    try {
      if (hold.record.stage === 'sending') {
        if (hold.lease.heldHere || (await hold.lease.renew())) return;
        throw sidecarErrors.idempotencyClaimLost();
      }
      await this.moveToSending(ticket, hold);
    } catch (err) {
      if (err instanceof StateStoreUnavailableError) throw sidecarErrors.idempotencyUnavailable(err);
      throw err;
    }
  }

  private async moveToSending(ticket: Ticket, hold: Hold): Promise<void> {
    const { storeKey } = ticket;
    const sending = encodeRecord({ ...hold.record, stage: 'sending' });
    const writtenAt = performance.now();
    const writes = [
      { key: storeKey, value: sending, ttlMs: this.inProgressTtlMs(hold.record) },
      ...this.leaseWrites(storeKey, hold.record),
    ];
    let moved: boolean;
    hold.moving = true;
    try {
      moved = await this.options.store.writeIf([{ key: storeKey, holds: hold.current }], writes, SENDING);
    } catch (err) {
      // Perhaps applied: release must try this value too. Nothing is sent on a write not known to be kept.
      hold.uncertain.push(sending);
      throw err;
    } finally {
      hold.moving = false;
    }
    if (!moved) {
      hold.lease.markLost();
      this.options.log.warn(
        { event: 'idempotency.claim_lost', idempotencyKeySha256: ticket.keySha256, requestId: hold.record.owner },
        'this claim was taken over while its replica was paused or cut off; nothing sent',
      );
      throw sidecarErrors.idempotencyClaimLost();
    }
    hold.current = sending;
    hold.record = { ...hold.record, stage: 'sending' };
    hold.lease.renewedAt(writtenAt);
  }

  /**
   * Writes this claim's record and its lease where the key holds nothing. A command that timed out may still have
   * been applied: the request is refused (nothing is sent) and the record, if it was written, is deleted again (and
   * again later, when the store does not answer now), so the caller's retry is not answered 409 for a request that
   * never left. Only this claim's own value is deleted;
   * should the delete fail too, the record stays `claimed` and a retry takes it over once its lease ran out.
   */
  private async setClaim(storeKey: string, record: InProgressRecord, value: string): Promise<boolean> {
    const { store } = this.options;
    try {
      return await store.writeIf(
        [{ key: storeKey, holds: undefined }],
        this.claimWrites(storeKey, record, value),
        CLAIM,
      );
    } catch (err) {
      const deleteOwn = () => this.deleteOwn(storeKey, [value]);
      await deleteOwn().catch(() => this.releaseLater(storeKey, deleteOwn));
      // Not waited for: a lease alone holds nothing (it names this claim, which no record holds now) and expires.
      if (this.leased) void store.compareAndDelete(leaseKeyOf(storeKey, record.claim), LEASE_VALUE).catch(() => false);
      throw err;
    }
  }

  /**
   * A dead holder's `claimed` record, made this request's in one step: only while the record is still the one read
   * and its lease still gone, so of two retries racing for it one wins (the other reads the winner's live claim: 409).
   * Undefined when the record moved meanwhile (the caller reads it again).
   */
  private async takeOver(
    key: IdempotencyKey,
    storeKey: string,
    found: string,
    dead: InProgressRecord,
    deadLeaseKey: string | undefined,
    owner: string,
  ): Promise<Claim | undefined> {
    const mine = this.newRecord(dead.fingerprint, owner);
    const value = encodeRecord(mine);
    const conditions: Condition[] = [{ key: storeKey, holds: found }];
    if (deadLeaseKey !== undefined) conditions.push({ key: deadLeaseKey, holds: undefined });
    const writtenAt = performance.now();
    if (!(await this.options.store.writeIf(conditions, this.claimWrites(storeKey, mine, value), CLAIM)))
      return undefined;
    this.options.log.warn(
      {
        event: 'idempotency.taken_over',
        requestId: owner,
        deadRequestId: dead.owner,
        idempotencyKeySha256: key.sha256,
      },
      "an earlier request's replica stopped before sending; this request took its claim and sends the payment",
    );
    return { kind: 'new', ticket: this.hold(key, storeKey, mine, value, writtenAt), tookOverFrom: dead.owner };
  }

  /**
   * Whether the holder of `record` is gone: its lease key expired. A record without a stage (an older sidecar's) has
   * no lease, nor has any in memory.
   */
  private async holderSeen(
    storeKey: string,
    record: InProgressRecord,
  ): Promise<{ readonly dead: boolean; readonly leaseKey: string | undefined }> {
    if (record.stage === undefined || !this.leased) return { dead: false, leaseKey: undefined };
    const leaseKey = leaseKeyOf(storeKey, record.claim);
    return { dead: (await this.options.store.get(leaseKey)) === undefined, leaseKey };
  }

  private newRecord(fingerprint: string, owner: string): InProgressRecord {
    return {
      state: 'in_progress',
      fingerprint,
      owner,
      deadline: this.options.now() + this.options.claimDeadlineMs,
      claim: randomBytes(9).toString('base64url'),
      stage: 'claimed',
    };
  }

  /** The record and its lease, as a claim (or a takeover) writes them. */
  private claimWrites(storeKey: string, record: InProgressRecord, value: string): Write[] {
    return [{ key: storeKey, value, ttlMs: this.inProgressTtlMs(record) }, ...this.leaseWrites(storeKey, record)];
  }

  /** The lease key's write beside each write of a claim: none in memory (ProcessLease). */
  private leaseWrites(storeKey: string, record: InProgressRecord): Write[] {
    if (!this.leased) return [];
    return [{ key: leaseKeyOf(storeKey, record.claim), value: LEASE_VALUE, ttlMs: this.options.leaseMs }];
  }

  /**
   * Whether claims carry a lease in the store: only where other replicas share it. The memory store dies with the
   * one process that holds all its claims, so none there can outlive its holder.
   */
  private get leased(): boolean {
    return this.options.store.kind === 'redis';
  }

  /** This replica's hold on a claim it has just written: the local claim, the hold and its renewing lease. */
  private hold(
    key: IdempotencyKey,
    storeKey: string,
    record: InProgressRecord,
    value: string,
    writtenAt: number,
  ): Ticket {
    const ticket: Ticket = { storeKey, keySha256: key.sha256, fingerprint: record.fingerprint, value };
    const hold: Hold = {
      record,
      current: value,
      uncertain: [],
      moving: false,
      lease: this.leased
        ? new StoreLease(
            this.options.store,
            storeKey,
            leaseKeyOf(storeKey, record.claim),
            () => (hold.moving ? undefined : hold.current),
            this.options.leaseMs,
            writtenAt,
          )
        : new ProcessLease(),
    };
    this.holds.set(ticket, hold);
    this.inFlight.set(storeKey, { fingerprint: record.fingerprint, deadline: record.deadline, value });
    return ticket;
  }

  /**
   * An in_progress record lives on past its deadline, so a late retry still finds it (and sees outcome_unknown):
   * until its deadline, then the TTL of an answer.
   */
  private inProgressTtlMs(record: InProgressRecord): number {
    return Math.max(1, record.deadline - this.options.now()) + this.options.ttlMs;
  }

  /**
   * This replica's claim of `storeKey`, while in flight. One past its deadline is left to the store (read as
   * abandoned there, as on every other replica) and dropped, so that a claim never settled cannot hold its key here.
   */
  private localClaim(storeKey: string): LocalClaim | undefined {
    const local = this.inFlight.get(storeKey);
    if (local === undefined || local.deadline > this.options.now()) return local;
    this.inFlight.delete(storeKey);
    return undefined;
  }

  /** The ticket's last write; its local claim ends only once that write is done (or failed). */
  private async guard(
    ticket: Ticket,
    step: string,
    run: () => Promise<boolean>,
    onFailure?: () => void,
  ): Promise<void> {
    const fields = { idempotencyKeySha256: ticket.keySha256, step };
    try {
      if (!(await run())) this.options.log.warn({ event: 'idempotency.record_changed', ...fields }, 'record not ours');
    } catch (err) {
      onFailure?.();
      this.options.log.error(
        { event: 'idempotency.record_not_saved', ...fields, errorName: errorName(err) },
        'idempotency record not updated; a retry with this key will read outcome_unknown after the deadline',
      );
    } finally {
      this.holds.get(ticket)?.lease.stop();
      this.holds.delete(ticket);
      if (this.inFlight.get(ticket.storeKey)?.value === ticket.value) this.inFlight.delete(ticket.storeKey);
    }
  }
}
