import { EventEmitter } from 'node:events';
import { defaultStoreBytes } from '../memory/budget.js';
import type { MemoryStoreUsage } from '../observability/state-store-metrics.js';
import {
  StateStoreUnavailableError,
  type Condition,
  type StateStore,
  type Write,
  type ReadRecord,
  type WriteOptions,
} from './state-store.js';

/**
 * A cap on the number of entries, beside the cap on bytes (maxBytes) that bounds the heap: it binds first only for
 * small entries (postback nonces and digests, answers of a few hundred bytes). Past either the oldest settled entries
 * go first, each counted (signing_sidecar_state_store_evictions_total, alert SigningSidecarStateStoreEvicting).
 */
export const DEFAULT_MEMORY_STORE_MAX_ENTRIES = 200_000;
/** How often expired entries are dropped even when nobody reads them. */
const SWEEP_INTERVAL_MS = 30_000;

/**
 * What one entry costs the heap beyond its two strings' characters, in bytes: the strings' headers (a template-literal
 * key is a cons string over its parts), the Entry object and the boxed double of its expiresAt, and the Map's slot
 * with its share of a hash table that doubles when full. Measured at 130-170 bytes on Node 20; with 200, the estimate
 * was 0.89-0.99 of the heap V8 reported for every kind of entry the sidecar writes
 * (test/state/memory-store-heap.test.ts checks it on the Node that runs the tests: never below the real cost).
 */
export const ENTRY_OVERHEAD_BYTES = 200;

/** A character of a string V8 must keep two-byte (UTF-16): anything past Latin-1 makes the whole string two-byte. */
const TWO_BYTE_CHAR = /[\u0100-\uffff]/;

/**
 * The heap an entry retains, approximately: each string costs one byte a character (V8 keeps a string whose
 * characters are all Latin-1 one-byte: the store's keys and JSON values nearly always are) or two (UTF-16), plus the
 * fixed overhead above.
 */
export function approximateBytes(key: string, value: string): number {
  const chars = (text: string) => text.length * (TWO_BYTE_CHAR.test(text) ? 2 : 1);
  return chars(key) + chars(value) + ENTRY_OVERHEAD_BYTES;
}

export interface MemoryStoreOptions {
  readonly maxEntries?: number;
  /** The budget of approximateBytes over every entry (SIDECAR_STATE_MEMORY_MAX_MB); by default `auto`'s. */
  readonly maxBytes?: number;
  /** Called with the key of every live entry dropped to stay within the limits (counted by the caller). */
  readonly onEvict?: (key: string) => void;
  readonly now?: () => number;
}

interface Entry {
  readonly value: string;
  readonly expiresAt: number;
  readonly bytes: number;
  /** Written with WriteOptions.pinned: never evicted. */
  readonly pinned: boolean;
}

/**
 * The single-pod store: a Map in insertion order, so the oldest entry is the first one evicted. Entries expire
 * lazily on read and by a periodic sweep. Every operation completes synchronously, so each is atomic.
 *
 * Bounded twice, so that it is full before the heap is (bounded by entries alone, a store of 500-byte answers reached
 * V8's heap limit and the process died with every key: docs/performance.md, "The memory store's budget"): at most
 * maxEntries entries and maxBytes of approximateBytes. Past either, the oldest settled entries are evicted, whatever
 * they hold (an idempotency answer, a postback digest or nonce): by age alone, so that a flood of one kind shortens
 * every kind's life alike rather than emptying another first. A pinned entry (a claim on work in flight) is never evicted: a new pinned
 * write that would not fit even with every settled entry gone is refused (StateStoreUnavailableError: the idempotency
 * claim answers 503 retryable, nothing sent; the postback 503, redelivered). A settled write is always stored, since
 * refusing it would lose an answer already given: pinned entries alone never exceed the budget, so the store is then
 * over it by that one entry at most, evicted by the next write.
 */
export class MemoryStateStore implements StateStore {
  readonly kind = 'memory';
  private readonly entries = new Map<string, Entry>();
  private readonly channels = new EventEmitter();
  private readonly maxEntries: number;
  private readonly maxBytes: number;
  private readonly now: () => number;
  private readonly sweeper: NodeJS.Timeout;
  private lastSweepAt = Number.NEGATIVE_INFINITY;
  private bytes = 0;
  private pinnedBytes = 0;
  private pinnedEntries = 0;

  constructor(private readonly options: MemoryStoreOptions = {}) {
    this.maxEntries = options.maxEntries ?? DEFAULT_MEMORY_STORE_MAX_ENTRIES;
    this.maxBytes = options.maxBytes ?? defaultStoreBytes();
    this.now = options.now ?? Date.now;
    this.channels.setMaxListeners(0);
    this.sweeper = setInterval(() => this.sweep(), SWEEP_INTERVAL_MS);
    this.sweeper.unref();
  }

  get size(): number {
    return this.entries.size;
  }

  /** How full it is, for the gauges (signing_sidecar_state_store_memory_*). */
  usage(): MemoryStoreUsage {
    return { bytes: this.bytes, maxBytes: this.maxBytes, entries: this.entries.size, maxEntries: this.maxEntries };
  }

  get(key: string): Promise<string | undefined> {
    return Promise.resolve(this.live(key)?.value);
  }

  /** Nothing is refused in memory: only this process writes it. */
  read(key: string): Promise<ReadRecord> {
    const value = this.live(key)?.value;
    return Promise.resolve(value === undefined ? { found: 'none' } : { found: 'value', value });
  }

  setIfAbsent(key: string, value: string, ttlMs: number, options?: WriteOptions): Promise<boolean> {
    return this.compareAndSet(key, undefined, value, ttlMs, options);
  }

  compareAndSet(
    key: string,
    expected: string | undefined,
    value: string,
    ttlMs: number,
    options?: WriteOptions,
  ): Promise<boolean> {
    const found = this.live(key);
    if (found?.value !== expected) return Promise.resolve(false);
    const entry: Entry = {
      value,
      expiresAt: this.now() + ttlMs,
      bytes: approximateBytes(key, value),
      pinned: options?.pinned === true,
    };
    if (entry.pinned && !this.pinnedFits(entry, found)) {
      return Promise.reject(
        new StateStoreUnavailableError(
          'memory store full: claims in flight alone fill SIDECAR_STATE_MEMORY_MAX_MB / SIDECAR_STATE_MEMORY_MAX_ENTRIES',
        ),
      );
    }
    this.write(key, entry, found);
    return Promise.resolve(true);
  }

  writeIf(conditions: readonly Condition[], writes: readonly Write[], options?: WriteOptions): Promise<boolean> {
    if (conditions.some(({ key, holds }) => this.live(key)?.value !== holds)) return Promise.resolve(false);
    const pinned = options?.pinned === true;
    const planned = writes.map(({ key, value, ttlMs }) => ({
      key,
      found: this.live(key),
      entry: { value, expiresAt: this.now() + ttlMs, bytes: approximateBytes(key, value), pinned },
    }));
    // All or nothing: every pinned write must fit before the first is made.
    if (pinned) {
      const extra = planned.reduce((sum, { entry }) => ({ bytes: sum.bytes + entry.bytes, count: sum.count + 1 }), {
        bytes: 0,
        count: 0,
      });
      const freed = planned.filter(({ found }) => found?.pinned === true);
      const probe: Entry = {
        value: '',
        expiresAt: 0,
        bytes: extra.bytes - freed.reduce((sum, { found }) => sum + (found?.bytes ?? 0), 0),
        pinned: true,
      };
      if (!this.pinnedFits(probe, undefined, extra.count - freed.length)) {
        return Promise.reject(
          new StateStoreUnavailableError(
            'memory store full: claims in flight alone fill SIDECAR_STATE_MEMORY_MAX_MB / SIDECAR_STATE_MEMORY_MAX_ENTRIES',
          ),
        );
      }
    }
    for (const { key, found, entry } of planned) this.write(key, entry, found);
    return Promise.resolve(true);
  }

  compareAndDelete(key: string, expected: string): Promise<boolean> {
    const found = this.live(key);
    if (found?.value !== expected) return Promise.resolve(false);
    this.remove(key, found);
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

  whenAvailable(): Promise<boolean> {
    return Promise.resolve(true);
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
      this.remove(key, entry);
      return undefined;
    }
    return entry;
  }

  /** Whether the pinned entries, `entry` in place of `replaced`, stay within both limits (expired ones swept first). */
  private pinnedFits(entry: Entry, replaced: Entry | undefined, entries = 1): boolean {
    const fits = () => {
      const freed = replaced?.pinned === true ? replaced : undefined;
      const bytes = this.pinnedBytes - (freed?.bytes ?? 0) + entry.bytes;
      const count = this.pinnedEntries - (freed === undefined ? 0 : 1) + entries;
      return bytes <= this.maxBytes && count <= this.maxEntries;
    };
    if (fits()) return true;
    this.sweepAtMostEverySecond();
    return fits();
  }

  private write(key: string, entry: Entry, replaced: Entry | undefined): void {
    // Deleted first so that a rewritten key moves to the young end of the insertion order.
    if (replaced !== undefined) this.remove(key, replaced);
    this.entries.set(key, entry);
    this.account(entry, 1);
    if (this.withinLimits()) return;
    this.sweepAtMostEverySecond();
    for (const [oldKey, old] of this.entries) {
      if (this.withinLimits()) break;
      if (old.pinned || oldKey === key) continue;
      this.remove(oldKey, old);
      this.options.onEvict?.(oldKey);
    }
  }

  private withinLimits(): boolean {
    return this.bytes <= this.maxBytes && this.entries.size <= this.maxEntries;
  }

  private remove(key: string, entry: Entry): void {
    this.entries.delete(key);
    this.account(entry, -1);
  }

  private account(entry: Entry, sign: 1 | -1): void {
    this.bytes += sign * entry.bytes;
    if (!entry.pinned) return;
    this.pinnedBytes += sign * entry.bytes;
    this.pinnedEntries += sign;
  }

  /** A full store of live entries must not cost a whole sweep per write. */
  private sweepAtMostEverySecond(): void {
    if (this.now() - this.lastSweepAt >= 1_000) this.sweep();
  }

  private sweep(): void {
    const now = this.now();
    this.lastSweepAt = now;
    for (const [key, entry] of this.entries) {
      if (entry.expiresAt <= now) this.remove(key, entry);
    }
  }
}
