/**
 * The sidecar's shared memory: the token record and its lock, the postback receiver's nonces and delivered
 * digests, the idempotency keys. One small interface, two implementations: in memory for one pod
 * (memory-store.ts), Redis for a fleet of replicas (redis-store.ts). Both pass the same contract suite
 * (test/state/store-contract.ts).
 *
 * Keys are short names chosen by the caller (`postback:nonce:<nonce>`); the store scopes them (Redis: the key
 * prefix and the account's hash tag), so two accounts or two products on one Redis never meet. Values are opaque
 * strings (callers store JSON). Every key has a TTL: nothing lives forever.
 *
 * Every method either answers within the store's command timeout or rejects with StateStoreUnavailableError.
 * What an unavailable store means is the caller's decision (the token falls back to its own copy, an idempotent
 * request is refused rather than sent unprotected, a postback is answered 503 so the gateway redelivers).
 */
/** How a write must be kept. */
export interface WriteOptions {
  /**
   * A record whose loss costs money (an idempotency claim before its request is sent, its final answer): the write
   * counts only once the configured number of Redis replicas hold it too (WAIT), so that a failover to one of them
   * does not take it back. Fewer in time: the call rejects with StateStoreUnavailableError. No effect in memory.
   */
  readonly acknowledged?: boolean;
  /**
   * A claim on work in flight (an idempotency claim whose request may be at the gateway, a postback being
   * forwarded): losing it early lets a second copy through. The memory store never evicts it to make room, and
   * refuses a new one with StateStoreUnavailableError rather than exceed its budget; it stays pinned until rewritten
   * without the flag, deleted or expired. No effect on Redis, which evicts nothing (`maxmemory-policy noeviction`).
   */
  readonly pinned?: boolean;
}

/** A key that must hold `holds` (undefined: nothing) for a writeIf to write. */
export interface Condition {
  readonly key: string;
  readonly holds: string | undefined;
}

/** A value writeIf stores, with its own TTL. */
export interface Write {
  readonly key: string;
  readonly value: string;
  readonly ttlMs: number;
}

export interface StateStore {
  readonly kind: 'memory' | 'redis';
  get(key: string): Promise<string | undefined>;
  /** Stores `value` only when the key holds nothing (SET NX PX); true when it was stored. */
  setIfAbsent(key: string, value: string, ttlMs: number, options?: WriteOptions): Promise<boolean>;
  /**
   * Replaces the value only when the key holds exactly `expected` (undefined: holds nothing), in one atomic step;
   * true when replaced. The TTL is set anew.
   */
  compareAndSet(
    key: string,
    expected: string | undefined,
    value: string,
    ttlMs: number,
    options?: WriteOptions,
  ): Promise<boolean>;
  /**
   * Writes every one of `writes` (whatever its key held) only when every one of `conditions` holds, in one atomic
   * step; true when written. All keys belong to one caller's record (Redis: one slot, under the account's tag).
   * `options` apply to every write.
   */
  writeIf(conditions: readonly Condition[], writes: readonly Write[], options?: WriteOptions): Promise<boolean>;
  /** Deletes the key only when it holds exactly `expected` (a lock released by its owner only); true when deleted. */
  compareAndDelete(key: string, expected: string): Promise<boolean>;
  /** Tells every replica's subscribers of `channel` (this one's included). Best effort: a missed message is fine. */
  publish(channel: string, message: string): Promise<void>;
  /** Calls `listener` for every message published on `channel` from now on; returns the unsubscribe function. */
  subscribe(channel: string, listener: (message: string) => void): Promise<() => Promise<void>>;
  /** True while the store answers (always, in memory). */
  isAvailable(): boolean;
  /**
   * Resolves true once the store answers, false when `timeoutMs` passes first or `signal` aborts; with `settle`,
   * false already at its first failure (a refused connection, a wrong password) or at once while it is down. True at
   * once in memory.
   */
  whenAvailable(timeoutMs: number, settle?: boolean, signal?: AbortSignal): Promise<boolean>;
  /** Called when the store becomes unavailable or available again. */
  onAvailabilityChange(listener: (available: boolean) => void): void;
  close(): Promise<void>;
}

/** The store could not answer within its command timeout (down, slow, refused): nothing is known of the key. */
export class StateStoreUnavailableError extends Error {
  override readonly name = 'StateStoreUnavailableError';

  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
  }
}
