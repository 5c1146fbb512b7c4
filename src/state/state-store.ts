/**
 * The sidecar's shared memory: the token record and its lock, the postback receiver's nonces and delivered
 * digests, the idempotency keys. One small interface, two implementations: in memory for one pod
 * (memory-store.ts), Redis for a fleet of replicas (redis-store.ts). Both pass the same contract suite
 * (test/state/store-contract.ts).
 *
 * Keys are short names chosen by the caller (`postback:nonce:<nonce>`); the store scopes them (Redis: the key
 * prefix and the account's hash tag), so two accounts or two products on one Redis never meet. Values are opaque
 * strings (callers store JSON). Every key has a TTL: nothing lives forever. On Redis with SIDECAR_STATE_MAC_KEY_FILE,
 * every value is sealed with a MAC bound to its key on the way in and checked on the way out (record-mac.ts), so no
 * caller reads back a record no sidecar wrote; comparisons (`expected`, `holds`) are on the value as the caller read it.
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
  /**
   * A lock or a cooldown: a key found without an expiry, or with more of it left than this write's TTL, counts as
   * absent (no sidecar writes one; whoever did would hold the fleet's logins off for ever). setIfAbsent only.
   */
  readonly bounded?: boolean;
  /**
   * A record refused by its MAC (written by no sidecar of this account, or under another MAC key) blocks the write as
   * any value would: an idempotency record, where taking a refused record for none could send a payment twice. By
   * default a refused record counts as absent: it is deleted and the write goes on (a token record, a lock, a replay
   * mark: a forger can then only make the sidecar lose one, as deleting it would). No effect in memory.
   */
  readonly refusedBlocks?: boolean;
}

/** A record as read: its value, nothing, or one refused by its MAC (counted and logged by the store). */
export type ReadRecord =
  { readonly found: 'value'; readonly value: string } | { readonly found: 'none' } | { readonly found: 'refused' };

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
  /** The value, or undefined when the key holds nothing or a record its MAC refuses. */
  get(key: string): Promise<string | undefined>;
  /** The value, nothing, or a refused record told apart (the idempotency keeper answers the last one itself). */
  read(key: string): Promise<ReadRecord>;
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
