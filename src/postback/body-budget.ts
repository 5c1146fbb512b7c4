// How many postback body bytes the receiver buffers at once. Every connection may hold a body of up to 1 MiB, and
// the connection cap is 256: without a shared budget, senders holding bodies just under the limit could buffer
// 256 MiB, past the container's memory limit, and the OOM kill would take the egress path down with the receiver.

/** A genuine postback is a few hundred bytes: a body up to this size never waits for the budget. */
export const FREE_BODY_BYTES = 64 * 1024;

/** Shared by the bytes of larger bodies: 32 bodies near 1 MiB at once; more are answered 503 (redelivered). */
export const BODY_BUDGET_BYTES = 32 * 1024 * 1024;

export class BodyBudget {
  private used = 0;

  constructor(private readonly limit: number = BODY_BUDGET_BYTES) {}

  /**
   * Reserves what a body of `declared` bytes needs beyond the free allowance (`undefined`: no Content-Length, so
   * up to `max`); returns the bytes to release() afterwards, or undefined when the budget cannot hold them. A
   * declared length over `max` needs nothing: that body is refused (413) before a byte of it is read.
   */
  reserve(declared: number | undefined, max: number): number | undefined {
    if (declared !== undefined && declared > max) return 0;
    const needed = Math.max(0, (declared ?? max) - FREE_BODY_BYTES);
    if (needed === 0) return 0;
    if (this.used + needed > this.limit) return undefined;
    this.used += needed;
    return needed;
  }

  release(bytes: number): void {
    this.used = Math.max(0, this.used - bytes);
  }

  /** Bytes reserved now (tests). */
  get reserved(): number {
    return this.used;
  }
}
