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
}

/** TokenManager's default waitForTokenMs (src/token/token-manager.ts), which no setting changes. */
export const TOKEN_WAIT_MS = 10_000;

/** Signing, store round trips, and the wall clocks of two replicas that differ by a few seconds. */
export const DEADLINE_MARGIN_MS = 5_000;

/**
 * 2 x token wait + connect retry deadline + 2 x (2 x connect timeout + response timeout) + margin.
 * - a token wait, then connection failures retried until the connect retry deadline;
 * - the last attempt may start just before that deadline: a wait for a free connection and the connection itself
 *   (each up to the connect timeout), then the response timeout;
 * - a 401 FAILED: a second token wait and one more attempt (connect, connect, response).
 * With the defaults: 2 x 10 s + 10 s + 2 x (2 x 5 s + 30 s) + 5 s = 115 s.
 */
export function longestRequestMs(settings: RequestTimeSettings): number {
  const attempt = 2 * settings.connectTimeoutMs + settings.responseTimeoutMs;
  return 2 * settings.tokenWaitMs + settings.connectRetryDeadlineMs + 2 * attempt + DEADLINE_MARGIN_MS;
}
