import { EventEmitter } from 'node:events';
import type { StateStore } from './state-store.js';

/**
 * A day's idempotency keys and postbacks at about two a second, in tens of MB. Past it the oldest entries go
 * first, each counted (signing_sidecar_state_store_evictions_total, alert SigningSidecarStateStoreEvicting).
 */
export const DEFAULT_MEMORY_STORE_MAX_ENTRIES = 200_000;
/** How often expired entries are dropped even when nobody reads them. */
const SWEEP_INTERVAL_MS = 30_000;

export interface MemoryStoreOptions {
  readonly maxEntries?: number;
  /** Called with the key of every live entry dropped to stay within maxEntries (counted by the caller). */
  readonly onEvict?: (key: string) => void;
  readonly now?: () => number;
}

interface Entry {
  readonly value: string;
  readonly expiresAt: number;
}

/**
 * The single-pod store: a Map in insertion order, so the oldest entry is the first one evicted. Entries expire
 * lazily on read and by a periodic sweep. Every operation completes synchronously, so each is atomic.
 */
export class MemoryStateStore implements StateStore {
  readonly kind = 'memory';
  private readonly entries = new Map<string, Entry>();
  private readonly channels = new EventEmitter();
  private readonly maxEntries: number;
  private readonly now: () => number;
  private readonly sweeper: NodeJS.Timeout;
  private lastSweepAt = Number.NEGATIVE_INFINITY;

  constructor(private readonly options: MemoryStoreOptions = {}) {
    this.maxEntries = options.maxEntries ?? DEFAULT_MEMORY_STORE_MAX_ENTRIES;
    this.now = options.now ?? Date.now;
    this.channels.setMaxListeners(0);
    this.sweeper = setInterval(() => this.sweep(), SWEEP_INTERVAL_MS);
    this.sweeper.unref();
  }

  get size(): number {
    return this.entries.size;
  }

  get(key: string): Promise<string | undefined> {
    return Promise.resolve(this.live(key)?.value);
  }

  setIfAbsent(key: string, value: string, ttlMs: number): Promise<boolean> {
    return this.compareAndSet(key, undefined, value, ttlMs);
  }

  compareAndSet(key: string, expected: string | undefined, value: string, ttlMs: number): Promise<boolean> {
    if (this.live(key)?.value !== expected) return Promise.resolve(false);
    this.write(key, value, ttlMs);
    return Promise.resolve(true);
  }

  compareAndDelete(key: string, expected: string): Promise<boolean> {
    if (this.live(key)?.value !== expected) return Promise.resolve(false);
    this.entries.delete(key);
    return Promise.resolve(true);
  }

  publish(channel: string, message: string): Promise<void> {
    // Delivered on a later tick, as a message from Redis would be: a publisher never runs its own listener inline.
    setImmediate(() => this.channels.emit(channel, message));
    return Promise.resolve();
  }

  subscribe(channel: string, listener: (message: string) => void): Promise<() => Promise<void>> {
    this.channels.on(channel, listener);
    return Promise.resolve(() => {
      this.channels.off(channel, listener);
      return Promise.resolve();
    });
  }

  isAvailable(): boolean {
    return true;
  }

  onAvailabilityChange(): void {
    // Memory never becomes unavailable.
  }

  close(): Promise<void> {
    clearInterval(this.sweeper);
    this.channels.removeAllListeners();
    return Promise.resolve();
  }

  private live(key: string): Entry | undefined {
    const entry = this.entries.get(key);
    if (entry && entry.expiresAt <= this.now()) {
      this.entries.delete(key);
      return undefined;
    }
    return entry;
  }

  private write(key: string, value: string, ttlMs: number): void {
    // Deleted first so that a rewritten key moves to the young end of the insertion order.
    this.entries.delete(key);
    this.entries.set(key, { value, expiresAt: this.now() + ttlMs });
    if (this.entries.size <= this.maxEntries) return;
    // A full store of live entries must not cost a whole sweep per write: at most one sweep a second.
    if (this.now() - this.lastSweepAt >= 1_000) this.sweep();
    for (const oldest of this.entries.keys()) {
      if (this.entries.size <= this.maxEntries) break;
      this.entries.delete(oldest);
      this.options.onEvict?.(oldest);
    }
  }

  private sweep(): void {
    const now = this.now();
    this.lastSweepAt = now;
    for (const [key, entry] of this.entries) {
      if (entry.expiresAt <= now) this.entries.delete(key);
    }
  }
}
