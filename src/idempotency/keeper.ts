import { randomBytes } from 'node:crypto';
import { sidecarErrors } from '../errors.js';
import type { Logger } from '../observability/log.js';
import { NO_RECORD_MAC, type RecordMac } from '../state/record-mac.js';
import type { StateStore } from '../state/state-store.js';
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
  /** Wall clock (Unix ms): deadlines are compared across replicas. */
  readonly now: () => number;
  readonly log: Logger;
  /**
   * Signs each record written and checks each record read (SIDECAR_STATE_MAC_KEY_FILE): a record that fails is
   * neither replayed nor sent again (`unverified`). Default: none (the memory store).
   */
  readonly recordMac?: RecordMac;
}

/** This request holds the key: it must complete (an answer) or release (nothing was sent) its record. */
export interface Ticket {
  readonly storeKey: string;
  readonly keySha256: string;
  readonly fingerprint: string;
  /** The exact in_progress value written: compareAndSet and compareAndDelete act only on this claim. */
  readonly value: string;
}

/** What a claim found. Only `new` sends; every other kind answers without reaching the gateway. */
export type Claim =
  | { readonly kind: 'new'; readonly ticket: Ticket }
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
 * Claims and answers are written acknowledged: a Redis failover to a replica that had not received them would
 * forget the key, and a retry would be sent a second time. A claim whose replicas do not confirm in time is
 * refused like an unavailable store (and its record deleted again), so nothing is sent on it.
 */
const ACKNOWLEDGED = { acknowledged: true } as const;
/**
 * A claim is also pinned: the memory store never evicts it while its request may be at the gateway (evicted, a
 * retry after the local claim's deadline would be sent again), and refuses a new one when claims alone fill it: a
 * 503 with nothing sent. The answer that replaces it is not pinned: answers are what the store evicts, oldest first.
 */
const CLAIM = { acknowledged: true, pinned: true } as const;

/** A few rounds absorb a record that changes between two store calls; past them the key is busy. */
const CLAIM_ROUNDS = 4;

/** One of this replica's claims, from its claim to its last write. */
interface LocalClaim {
  readonly fingerprint: string;
  readonly deadline: number;
  /** The ticket's in_progress value: only its own complete or release ends it. */
  readonly value: string;
}

/**
 * The idempotency protocol on the state store, one record per key at `idempotency:<sha256 of key>`:
 * claim with setIfAbsent (in_progress), complete with compareAndSet (in_progress -> done), release with
 * compareAndDelete when nothing reached the gateway. Each step is one atomic store command, so two replicas
 * racing for one key cannot both send.
 */
export class IdempotencyKeeper {
  /**
   * This replica's own claims still in flight, by store key. The store can lose a record while its request is at
   * the gateway (the memory store evicts its oldest entries when full; a Redis restarts empty or fails over): a
   * retry that reaches this replica meanwhile is still answered from here, never sent a second time.
   */
  private readonly inFlight = new Map<string, LocalClaim>();
  private readonly mac: RecordMac;

  constructor(private readonly options: KeeperOptions) {
    this.mac = options.recordMac ?? NO_RECORD_MAC;
  }

  /** Rejects with StateStoreUnavailableError when the store cannot answer: the caller then must not send. */
  async claim(key: IdempotencyKey, fingerprint: string, owner: string): Promise<Claim> {
    const { store, now } = this.options;
    const storeKey = `idempotency:${key.sha256}`;
    const local = this.localClaim(storeKey);
    if (local !== undefined)
      return local.fingerprint === fingerprint ? { kind: 'in_progress' } : { kind: 'key_reused' };
    for (let round = 0; round < CLAIM_ROUNDS; round++) {
      const mine: InProgressRecord = {
        state: 'in_progress',
        fingerprint,
        owner,
        deadline: now() + this.options.claimDeadlineMs,
        claim: randomBytes(9).toString('base64url'),
      };
      const value = this.mac.seal(storeKey, encodeRecord(mine));
      if (await this.setClaim(storeKey, value)) {
        this.inFlight.set(storeKey, { fingerprint, deadline: mine.deadline, value });
        return { kind: 'new', ticket: { storeKey, keySha256: key.sha256, fingerprint, value } };
      }
      const found = await store.get(storeKey);
      if (found === undefined) continue; // released or expired between the two calls: claim again
      const opened = this.mac.open('idempotency', storeKey, found);
      if ('rejected' in opened) return { kind: 'unverified' };
      const record = decodeRecord(opened.content);
      if (record.fingerprint !== fingerprint) return { kind: 'key_reused' };
      if (record.state === 'done') return { kind: 'replayed', answer: record.answer };
      if (record.deadline > now()) return { kind: 'in_progress' };
      // Its replica died (or lost the store) after it may have sent: never resend, record outcome_unknown.
      const answer = errorAnswer(sidecarErrors.outcomeUnknown(502, 'abandoned'));
      const done = this.mac.seal(storeKey, encodeRecord({ state: 'done', fingerprint, answer }));
      if (await store.compareAndSet(storeKey, found, done, this.options.ttlMs, ACKNOWLEDGED)) {
        return { kind: 'abandoned', answer, owner: record.owner };
      }
    }
    return { kind: 'in_progress' };
  }

  /**
   * Records the answer the caller got. Never rejects: the caller gets its answer whatever the store does, and a
   * record left in_progress reads as outcome_unknown after its deadline (never as "send it").
   */
  async complete(ticket: Ticket, answer: KeptAnswer): Promise<void> {
    const record = encodeRecord({ state: 'done', fingerprint: ticket.fingerprint, answer } satisfies DoneRecord);
    const done = this.mac.seal(ticket.storeKey, record);
    const { store, ttlMs } = this.options;
    await this.guard(ticket, 'complete', async () => {
      if (await store.compareAndSet(ticket.storeKey, ticket.value, done, ttlMs, ACKNOWLEDGED)) return true;
      // Evicted or expired meanwhile: written back, or a retry would be sent again. Anything else that holds the
      // key now (an abandoned record turned outcome_unknown) is left as it is.
      return store.setIfAbsent(ticket.storeKey, done, ttlMs, ACKNOWLEDGED);
    });
  }

  /** Deletes this claim's record: nothing reached the gateway, so a retry with the key must go through. */
  async release(ticket: Ticket): Promise<void> {
    await this.guard(ticket, 'release', () => this.options.store.compareAndDelete(ticket.storeKey, ticket.value));
  }

  /**
   * setIfAbsent of this claim's record. A command that timed out may still have been applied: the request is refused
   * (nothing is sent) and the record, if it was written, is deleted again, so the caller's retry is not answered 409
   * and then outcome_unknown for a request that never left. Only this claim's own value is deleted; should the
   * delete fail too, the record reads as outcome_unknown after its deadline: never a second send.
   */
  private async setClaim(storeKey: string, value: string): Promise<boolean> {
    const { store } = this.options;
    try {
      return await store.setIfAbsent(storeKey, value, this.inProgressTtlMs, CLAIM);
    } catch (err) {
      await store.compareAndDelete(storeKey, value).catch(() => false);
      throw err;
    }
  }

  /** An in_progress record lives on past its deadline, so a late retry still finds it (and sees outcome_unknown). */
  private get inProgressTtlMs(): number {
    return this.options.claimDeadlineMs + this.options.ttlMs;
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
  private async guard(ticket: Ticket, step: string, run: () => Promise<boolean>): Promise<void> {
    const fields = { idempotencyKeySha256: ticket.keySha256, step };
    try {
      if (!(await run())) this.options.log.warn({ event: 'idempotency.record_changed', ...fields }, 'record not ours');
    } catch (err) {
      const errorName = err instanceof Error ? err.name : typeof err;
      this.options.log.error(
        { event: 'idempotency.record_not_saved', ...fields, errorName },
        'idempotency record not updated; a retry with this key will read outcome_unknown after the deadline',
      );
    } finally {
      if (this.inFlight.get(ticket.storeKey)?.value === ticket.value) this.inFlight.delete(ticket.storeKey);
    }
  }
}
