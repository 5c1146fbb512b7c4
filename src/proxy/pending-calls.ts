/**
 * Calls still running, so that shutdown can wait for their last writes. A request's serve() goes on after its
 * caller was answered (shutdown answers cut-off requests first; their idempotency record is written once the
 * gateway connection is given up): the state store must stay open until that write is done.
 */
export class PendingCalls {
  private readonly running = new Set<Promise<unknown>>();

  /** Tracks `call` until it settles (resolved or rejected: the caller handles its errors). */
  track(call: Promise<unknown>): void {
    this.running.add(call);
    const done = () => void this.running.delete(call);
    void call.then(done, done);
  }

  /** Resolves true once no call is running, or false after `timeoutMs`, whichever comes first. */
  async idle(timeoutMs: number): Promise<boolean> {
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<false>((resolve) => (timer = setTimeout(() => resolve(false), timeoutMs)));
    try {
      // Again after each round: a call may have started while the previous ones were finishing.
      while (this.running.size > 0) {
        const all = Promise.allSettled(this.running).then(() => true);
        if (!(await Promise.race([all, timeout]))) return false;
      }
      return true;
    } finally {
      clearTimeout(timer);
    }
  }
}
