import { randomBytes } from 'node:crypto';
import type { StateStore } from '../state/state-store.js';

/** The token lock's key and the channel generations are announced on (scoped per account by the store). */
export const TOKEN_LOCK_KEY = 'token:lock';
export const TOKEN_CHANNEL = 'token:generation';
/** A lock found without an expiry, or with more left than a lock lives, is no replica's: taken as free. */
const BOUNDED = { bounded: true } as const;

/**
 * The token lock and the generation channel. The lock is a key set only when absent, with a random value and a
 * TTL: a holder that dies or stalls loses it when the TTL runs out, and only its owner (who knows the value) can
 * release it early. Whoever waits for a holder listens on the channel, and re-reads after a short wait anyway
 * (a publication is best effort).
 */
export class FleetLock {
  private readonly waiters = new Set<(generation: number) => void>();
  /** Who hears every announcement (fleet-source.ts): added and removed by themselves through listen(). */
  private readonly listeners = new Set<(generation: number) => void>();
  /**
   * Our lock values the store could not delete at release (it was away), with when they expire by themselves
   * (monotonic ms). Deleted first at the next take: a replica back from a blip must not wait out its own lock for
   * up to its whole lifetime before it can share the token it got meanwhile.
   */
  private readonly unreleased = new Map<string, number>();
  /** Our lock values from take() to release(): put back at once if Redis loses them (reassert). */
  private readonly mine = new Set<string>();
  private unsubscribe: (() => Promise<void>) | undefined;
  private subscribing: Promise<void> | undefined;
  private stopped = false;

  constructor(
    private readonly store: StateStore,
    private readonly lockTtlMs: number,
    private readonly pollMs: number,
  ) {}

  /** Calls `listener` with every generation announced; returns how to stop. */
  listen(listener: (generation: number) => void): () => void {
    this.listeners.add(listener);
    return () => {
      this.listeners.delete(listener);
    };
  }

  /** Subscribes to the channel; a store that is away now is tried again by the caller when it returns. */
  subscribe(): Promise<void> {
    if (this.unsubscribe || this.stopped) return Promise.resolve();
    this.subscribing ??= this.store
      .subscribe(TOKEN_CHANNEL, (message) => this.heard(message))
      .then(
        (unsubscribe) => {
          if (this.stopped) void unsubscribe().catch(() => undefined);
          else this.unsubscribe = unsubscribe;
        },
        () => undefined,
      )
      .finally(() => (this.subscribing = undefined));
    return this.subscribing;
  }

  stop(): void {
    this.stopped = true;
    void this.unsubscribe?.().catch(() => undefined);
    this.unsubscribe = undefined;
    for (const wake of this.waiters) wake(0);
  }

  /** The lock's value when taken, undefined when another replica holds it. */
  async take(): Promise<string | undefined> {
    await this.releaseLeftovers();
    const value = randomBytes(16).toString('hex');
    if (!(await this.store.setIfAbsent(TOKEN_LOCK_KEY, value, this.lockTtlMs, BOUNDED))) return undefined;
    this.mine.add(value);
    return value;
  }

  /**
   * After Redis lost its dataset (store-epoch.ts): the locks this replica holds are written again before another
   * replica takes the empty key and logs in beside our grant in flight. Set only when absent: a replica that took
   * the key first keeps it, and our writes stay fenced by the record's compare-and-set.
   */
  async reassert(): Promise<void> {
    for (const value of this.mine) {
      await this.store.setIfAbsent(TOKEN_LOCK_KEY, value, this.lockTtlMs, BOUNDED).catch(() => false);
    }
  }

  /**
   * Runs `work` while holding the lock `value`, pushing its expiry out every third of its lifetime: a grant may take
   * as long as its HTTP call may, while a holder that dies or stalls still loses the lock within one lifetime. A
   * push that fails (the lock expired and was taken, or the store is away) changes nothing: the holder's writes are
   * fenced by compare-and-set on the record it claimed.
   */
  async holding<T>(value: string, work: Promise<T>): Promise<T> {
    const timer = setInterval(() => void this.extend(value), this.lockTtlMs / 3).unref();
    try {
      return await work;
    } finally {
      clearInterval(timer);
    }
  }

  /** Best effort: a lock that cannot be released now is released at the next take, or expires with its TTL. */
  async release(value: string): Promise<void> {
    this.mine.delete(value);
    try {
      await this.store.compareAndDelete(TOKEN_LOCK_KEY, value);
    } catch {
      // The store is away. Only values whose holder is done get here, so deleting one later never frees a lock
      // that a flight of this replica still holds. It lives at most the lock's lifetime from now.
      this.unreleased.set(value, performance.now() + this.lockTtlMs);
    }
  }

  /** The lock's full lifetime again, if it is still ours (compare-and-set of its own value). */
  private async extend(value: string): Promise<boolean> {
    return this.store.compareAndSet(TOKEN_LOCK_KEY, value, value, this.lockTtlMs).catch(() => false);
  }

  /** Compare-and-delete: a value of ours that expired meanwhile, the key perhaps taken by another, is left alone. */
  private async releaseLeftovers(): Promise<void> {
    for (const [value, expiresAt] of this.unreleased) {
      if (performance.now() < expiresAt) await this.store.compareAndDelete(TOKEN_LOCK_KEY, value);
      this.unreleased.delete(value);
    }
  }

  announce(generation: number): Promise<void> {
    return this.store.publish(TOKEN_CHANNEL, String(generation)).catch(() => undefined);
  }

  /** Resolves when a generation above `above` is announced, or after the poll interval, whichever comes first. */
  news(above: number): Promise<void> {
    return new Promise((resolve) => {
      const wake = (generation: number): void => {
        if (generation !== 0 && generation <= above) return;
        clearTimeout(timer);
        this.waiters.delete(wake);
        resolve();
      };
      const timer = setTimeout(() => wake(0), this.pollMs);
      this.waiters.add(wake);
    });
  }

  private heard(message: string): void {
    const generation = Number(message);
    if (!Number.isSafeInteger(generation) || generation <= 0) return;
    for (const wake of [...this.waiters]) wake(generation);
    for (const listener of [...this.listeners]) listener(generation);
  }
}
