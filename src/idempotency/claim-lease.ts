import type { StateStore } from '../state/state-store.js';

/** What a lease key holds: only whether it exists counts. */
export const LEASE_VALUE = '1';

/**
 * The key that says a claim's holder is alive: `<record key>:lease:<claim>`, written with the claim and renewed by
 * its holder, so it expires by the store's own clock (no two replicas' clocks are compared) once the holder stops.
 * Named after the claim, so a new claim of the key never meets an old claim's lease.
 */
export function leaseKeyOf(storeKey: string, claim: string): string {
  return `${storeKey}:lease:${claim}`;
}

/** What the keeper asks of a claim's lease. */
export interface Lease {
  /** Whether this replica may take the lease as its own without asking the store: renewed in time, never lost. */
  readonly heldHere: boolean;
  readonly isLost: boolean;
  /** A write that carried the lease (the move to `sending`) renewed it, from `writtenAt` (performance.now()). */
  renewedAt(writtenAt: number): void;
  /** The store refused a write on this claim: it is someone else's now. */
  markLost(): void;
  stop(): void;
  /** One renewal: true while the lease is this claim's. Rejects with StateStoreUnavailableError (no answer). */
  renew(): Promise<boolean>;
}

/**
 * The memory store's: it lives and dies with this process, and so does every claim in it, so no claim there can
 * outlive its holder. Nothing is written; only a write the store refused ends it.
 */
export class ProcessLease implements Lease {
  private lost = false;

  get heldHere(): boolean {
    return !this.lost;
  }

  get isLost(): boolean {
    return this.lost;
  }

  renewedAt(): void {
    // Nothing expires.
  }

  markLost(): void {
    this.lost = true;
  }

  stop(): void {
    // No timer.
  }

  renew(): Promise<boolean> {
    return Promise.resolve(!this.lost);
  }
}

/**
 * One claim's lease in a store shared by replicas (Redis), renewed every third of its length while its request lives. A renewal that finds the lease
 * key gone (its holder was paused or cut off past it) writes it again only while the record is still this claim's;
 * one that finds the record changed (a retry took the claim over, or recorded outcome_unknown) marks the lease lost.
 * A renewal the store does not answer changes nothing: the lease then lapses by itself, here as in the store.
 */
export class StoreLease implements Lease {
  /** Until when (performance.now()) the lease surely stands in the store: it was renewed before then minus its length. */
  private standsUntil: number;
  private lost = false;
  private renewing: Promise<boolean> | undefined;
  private readonly timer: NodeJS.Timeout;

  constructor(
    private readonly store: Pick<StateStore, 'compareAndSet' | 'writeIf'>,
    private readonly storeKey: string,
    private readonly leaseKey: string,
    /**
     * The record value this claim holds now (it changes when the claim moves to `sending`); undefined while that
     * move is on its way, when the record may hold either value.
     */
    private readonly recordValue: () => string | undefined,
    private readonly leaseMs: number,
    /** performance.now() when the claim (and its lease) was written. */
    writtenAt: number,
  ) {
    this.standsUntil = writtenAt + leaseMs;
    this.timer = setInterval(() => void this.renew().catch(() => false), Math.max(1, Math.floor(leaseMs / 3)));
    this.timer.unref();
  }

  get heldHere(): boolean {
    return !this.lost && performance.now() < this.standsUntil;
  }

  get isLost(): boolean {
    return this.lost;
  }

  renewedAt(writtenAt: number): void {
    this.standsUntil = Math.max(this.standsUntil, writtenAt + this.leaseMs);
  }

  markLost(): void {
    this.lost = true;
    this.stop();
  }

  stop(): void {
    clearInterval(this.timer);
  }

  /** One at a time: a renewal asked for while one is on its way shares it. */
  renew(): Promise<boolean> {
    if (this.lost) return Promise.resolve(false);
    this.renewing ??= this.renewOnce().finally(() => (this.renewing = undefined));
    return this.renewing;
  }

  private async renewOnce(): Promise<boolean> {
    const started = performance.now();
    const { store, leaseKey, leaseMs } = this;
    if (await store.compareAndSet(leaseKey, LEASE_VALUE, LEASE_VALUE, leaseMs)) {
      this.renewedAt(started);
      return true;
    }
    // Lapsed: written again only if the record is still this claim's, in one step with that check. While the claim's
    // own move to `sending` is on its way, that move decides: it writes the lease with it, or finds the claim lost.
    const value = this.recordValue();
    if (value === undefined) return true;
    const lease = { key: leaseKey, value: LEASE_VALUE, ttlMs: leaseMs };
    if (await store.writeIf([{ key: this.storeKey, holds: value }], [lease])) {
      this.renewedAt(started);
      return true;
    }
    // The record moved meanwhile by this claim's own write (to `sending`, which carried the lease), or that move is
    // on its way (its acknowledged write not yet returned): not lost.
    if (this.recordValue() !== value) return true;
    this.markLost();
    return false;
  }
}
