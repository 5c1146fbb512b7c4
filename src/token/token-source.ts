import type { TraceContext } from '../observability/tracing.js';
import type { TokenSet } from './token-set.js';

/** What the token manager holds when it asks its source for a token. */
export interface HeldToken {
  readonly set: TokenSet | undefined;
  /** Whether requests can use it now (not rejected, not about to expire): asked again after a failed grant. */
  readonly usable: () => boolean;
}

/**
 * Where the token manager's tokens come from: this replica's own grants (local-source.ts), or the fleet's shared
 * record on the state store (fleet-source.ts). The manager keeps the token, its schedule and its waiters; the
 * source decides which grant to make (grant-decision.ts) and makes it.
 */
export interface TokenSource {
  /**
   * Starts listening; `onNews` is called when the source may have a token newer than the one held (then ask
   * `sync`). A local source has no news.
   */
  start(onNews: () => void): void;
  stop(): void;
  /**
   * A token in place of `held`: a new one, or `held.set` itself when it is to be kept and looked at again soon
   * (the fleet's store is away). Throws when none can be had now. `trace`: the span its grants are made under (a
   * request's wait for a token); undefined for a refresh of the schedule's own.
   */
  acquire(held: HeldToken, trace?: TraceContext): Promise<TokenSet>;
  /** Without a gateway call: a token to take in place of `held` (the fleet moved on), or undefined to keep it. */
  sync(held: HeldToken): Promise<TokenSet | undefined>;
  /** A grant in flight is worth waiting for at shutdown: its result reaches the other replicas. */
  readonly shared: boolean;
}
