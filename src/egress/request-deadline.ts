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

/** A request as its deadline sees it: ended by expire() when its time is up. */
export interface Expiring {
  expire(): void;
}

/** A request's place among the deadlines: what add() returns and remove() takes. */
export interface Deadline {
  readonly request: Expiring;
  /** performance.now() time at which it falls due. */
  readonly at: number;
  previous: Deadline | undefined;
  next: Deadline | undefined;
  listed: boolean;
}

/**
 * The deadlines of one listener's requests, on one timer. Every request gets the same time from its arrival, so they
 * fall due in the order they arrived: a list in arrival order is in deadline order, and only its first entry needs
 * a timer. A timer per request was a Timeout object and a closure for every request, and a Map of the requests
 * grew and shrank its table as they came and went (both 0.2-0.4 KB of heap a request); a list entry is one small
 * object. The timer is not cancelled when the list empties: it fires once, finds nothing due, and is made again by
 * the next request.
 */
export class RequestDeadlines {
  private first: Deadline | undefined;
  private last: Deadline | undefined;
  private timer: NodeJS.Timeout | undefined;
  private readonly fire: () => void;

  constructor(readonly deadlineMs: number) {
    const fire = (): void => {
      this.timer = undefined;
      const now = performance.now();
      for (let due = this.first; due !== undefined && due.at <= now; due = this.first) {
        this.remove(due);
        due.request.expire();
      }
      if (this.first !== undefined) this.arm(this.first.at - now);
    };
    this.fire = fire;
  }

  /** From now, `request` has deadlineMs until its deadline is removed. */
  add(request: Expiring): Deadline {
    const deadline: Deadline = {
      request,
      at: performance.now() + this.deadlineMs,
      previous: this.last,
      next: undefined,
      listed: true,
    };
    if (this.last === undefined) this.first = deadline;
    else this.last.next = deadline;
    this.last = deadline;
    if (this.timer === undefined) this.arm(this.deadlineMs);
    return deadline;
  }

  /** The request is done (or expired): its deadline no longer applies. Once is enough; again does nothing. */
  remove(deadline: Deadline): void {
    if (!deadline.listed) return;
    deadline.listed = false;
    const { previous, next } = deadline;
    if (previous === undefined) this.first = next;
    else previous.next = next;
    if (next === undefined) this.last = previous;
    else next.previous = previous;
    deadline.previous = deadline.next = undefined;
  }

  private arm(ms: number): void {
    this.timer = setTimeout(this.fire, ms).unref();
  }
}
