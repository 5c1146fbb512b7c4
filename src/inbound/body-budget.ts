// How many request body bytes a listener buffers at once. Each connection may hold a body up to the listener's
// limit: without a shared budget, callers holding bodies just under it could buffer limit x connections (the egress
// listener: 1 MiB x 1,024 = 1 GiB), past the container's memory limit, and the OOM kill would stop every payment.
// Used by the egress listener (src/start/egress.ts) and the postback receiver (src/postback/receiver.ts), each its own
// sizes.

export interface BodyBudgetSizes {
  /** A body up to this size never waits for the budget: the small bodies that are the listener's real traffic. */
  readonly freeBytes: number;
  /** Shared by the bytes of larger bodies beyond `freeBytes`; a body that does not fit is refused (503). */
  readonly poolBytes: number;
}

export class BodyBudget {
  private used = 0;

  constructor(private readonly sizes: BodyBudgetSizes) {}

  /**
   * Reserves what a body of `declared` bytes needs beyond the free allowance (`undefined`: no Content-Length, so
   * up to `max`); returns the bytes to release() afterwards, or undefined when the budget cannot hold them. A
   * declared length over `max` needs nothing: that body is refused (413) before a byte of it is read.
   */
  reserve(declared: number | undefined, max: number): number | undefined {
    if (declared !== undefined && declared > max) return 0;
    const needed = Math.max(0, (declared ?? max) - this.sizes.freeBytes);
    if (needed === 0) return 0;
    if (this.used + needed > this.sizes.poolBytes) return undefined;
    this.used += needed;
    return needed;
  }

  /** reserve() for a body whose Content-Length header is `contentLength` (absent, or not a number: none declared). */
  reserveDeclared(contentLength: string | undefined, max: number): number | undefined {
    const declared = Number(contentLength);
    return this.reserve(Number.isFinite(declared) ? declared : undefined, max);
  }

  release(bytes: number): void {
    this.used = Math.max(0, this.used - bytes);
  }

  /** Bytes reserved now (tests). */
  get reserved(): number {
    return this.used;
  }
}
