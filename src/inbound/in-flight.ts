// A listener's requests in flight, for its shutdown: which still wait for their answer, when the last connection
// is done with, and when the work each does after its answer (records, log lines) is over. In lists rather than
// Sets: src/memory/linked-list.ts says why.
import { LinkedList, type Link } from '../memory/linked-list.js';

/** One inbound request, as the tracking sees it. */
export interface InFlightRequest {
  /** Calls `listener` once the client's connection for this request is closed. */
  onClose(listener: () => void): void;
  /** Resolves once its handling is settled, answer written and whatever follows it done. */
  readonly done: Promise<void>;
  readonly isAnswered: boolean;
}

/**
 * The requests from arrival until the client's connection for them closes, and until their handling is settled:
 * shutdown waits for the first to stop serving, and for the second before it closes the state store (an egress
 * request cut off by shutdown still writes its idempotency record afterwards).
 */
export class InFlightRequests<Request extends InFlightRequest = InFlightRequest> {
  private readonly open = new LinkedList<Request>();
  private readonly unsettled = new LinkedList<Request>();
  private readonly idleWaiters: Array<() => void> = [];

  /** Called once per request, from the server's request listener. */
  track(request: Request): void {
    const open = this.open.add(request);
    const unsettled = this.unsettled.add(request);
    request.onClose(() => this.finished(open));
    void request.done.then(() => this.unsettled.remove(unsettled));
  }

  private finished(open: Link<Request>): void {
    this.open.remove(open);
    if (this.open.size === 0) this.idleWaiters.splice(0).forEach((wake) => wake());
  }

  get active(): number {
    return this.open.size;
  }

  /** Requests still waiting for their answer. */
  unanswered(): Request[] {
    return this.open.values().filter((request) => !request.isAnswered);
  }

  /** Resolves when no request is in flight, or after `maxMs`, whichever comes first; true when drained. */
  waitIdle(maxMs: number): Promise<boolean> {
    if (this.open.size === 0) return Promise.resolve(true);
    return new Promise((resolve) => {
      const timer = setTimeout(() => resolve(false), maxMs);
      this.idleWaiters.push(() => {
        clearTimeout(timer);
        resolve(true);
      });
    });
  }

  /**
   * Resolves true once every request's handling is settled, or false after `maxMs`. Again after each round: a
   * request may have arrived while the others were settling.
   */
  async settled(maxMs: number): Promise<boolean> {
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<false>((resolve) => (timer = setTimeout(() => resolve(false), maxMs)));
    try {
      while (this.unsettled.size > 0) {
        const all = Promise.all(this.unsettled.values().map((request) => request.done)).then(() => true);
        if (!(await Promise.race([all, timeout]))) return false;
      }
      return true;
    } finally {
      clearTimeout(timer);
    }
  }
}
