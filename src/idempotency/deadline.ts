/** Signing, the wall clocks of two replicas that differ by a few seconds, and the event loop's own delays. */
export const DEADLINE_MARGIN_MS = 5_000;

/**
 * How long an idempotency claim stands before a retry elsewhere takes it as abandoned (docs/idempotency.md, "When a
 * replica dies mid-request"): the request deadline (egress/request-deadline.ts), the record's two writes (the claim, then the one that settles
 * it, which must land before this or a retry takes the record as abandoned), and the margin. `storeWriteMs` is the
 * longest one write may take: SIDECAR_REDIS_COMMAND_TIMEOUT_MS, twice that when it waits for replicas (the write,
 * then WAIT); 0 in memory. With the defaults: 115 s in memory, 115.2 s on Redis.
 */
export function claimDeadlineMs(requestDeadline: number, storeWriteMs: number): number {
  return requestDeadline + 2 * storeWriteMs + DEADLINE_MARGIN_MS;
}
