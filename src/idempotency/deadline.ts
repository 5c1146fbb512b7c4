/**
 * How long a request may take from the moment its key is claimed (its body already read) to its answer, from the
 * settings; an in_progress record older than this was left by a replica that died or lost its store, and is
 * answered outcome_unknown (docs/idempotency.md, "When a replica dies mid-request").
 */
export interface RequestTimeSettings {
  /** How long a request waits for an access token being fetched (TokenManager's waitForTokenMs). */
  readonly tokenWaitMs: number;
  readonly connectTimeoutMs: number;
  readonly responseTimeoutMs: number;
  readonly connectRetryDeadlineMs: number;
  /**
   * The longest one write of the record may take: SIDECAR_REDIS_COMMAND_TIMEOUT_MS, twice that when it waits for
   * replicas (the write, then WAIT); 0 in memory: no wait.
   */
  readonly storeWriteMs: number;
}

/** Signing, the wall clocks of two replicas that differ by a few seconds, and the event loop's own delays. */
export const DEADLINE_MARGIN_MS = 5_000;

/**
 * 2 x token wait + connect retry deadline + 2 x (2 x connect timeout + response timeout)
 *   + 2 x store write + margin.
 * - a token wait, then connection failures retried until the connect retry deadline;
 * - the last attempt may start just before that deadline: a wait for a free connection and the connection itself
 *   (each up to the connect timeout), then the response timeout;
 * - a 401 FAILED: a second token wait and one more attempt (connect, connect, response);
 * - the store commands counted from the deadline's making: the claim's write, and the write that settles the record
 *   (it must land before the deadline, or a retry elsewhere takes the record as abandoned).
 * With the defaults: 2 x 10 s + 10 s + 2 x (2 x 5 s + 30 s) + 5 s = 115 s in memory, 115.2 s on Redis (100 ms).
 */
export function longestRequestMs(settings: RequestTimeSettings): number {
  const attempt = 2 * settings.connectTimeoutMs + settings.responseTimeoutMs;
  const store = 2 * settings.storeWriteMs;
  return 2 * settings.tokenWaitMs + settings.connectRetryDeadlineMs + 2 * attempt + store + DEADLINE_MARGIN_MS;
}
