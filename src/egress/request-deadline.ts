/** The settings that bound one request's time at the sidecar, once its body is read. */
export interface RequestTimeSettings {
  /** How long a request waits for an access token being fetched (TokenManager.waitForTokenMs). */
  readonly tokenWaitMs: number;
  readonly connectTimeoutMs: number;
  readonly responseTimeoutMs: number;
  readonly connectRetryDeadlineMs: number;
}

/**
 * The request deadline, from the request's arrival: the longest its work can take when every step takes as long as
 * its own setting allows, so that it never cuts a request its settings would let finish. It ends the request's work
 * (request.ts): the token wait, the connection queue and the exchange.
 *   2 x token wait + connect retry deadline + 2 x (2 x connect timeout + response timeout)
 * - a token wait, then connection failures retried until the connect retry deadline;
 * - the last attempt may start just before that deadline: a wait for a free connection and the connection itself
 *   (each up to the connect timeout), then the response timeout;
 * - a 401 FAILED: a second token wait and one more attempt (connect, connect, response).
 * With the defaults: 2 x 10 s + 10 s + 2 x (2 x 5 s + 30 s) = 110 s. Fleet mode's third send after a second 401
 * FAILED (gateway-exchange.ts) is not counted: it fits in what two quick refusals left, and is cut here like any
 * other step. An idempotency claim stands longer than this (idempotency/deadline.ts, claimDeadlineMs).
 */
export function requestDeadlineMs(settings: RequestTimeSettings): number {
  const attempt = 2 * settings.connectTimeoutMs + settings.responseTimeoutMs;
  return 2 * settings.tokenWaitMs + settings.connectRetryDeadlineMs + 2 * attempt;
}
