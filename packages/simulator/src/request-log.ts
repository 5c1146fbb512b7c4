// What the simulator saw, for the dashboard: the newest requests and their verdicts. It is a ring buffer so a
// simulator left running for days stays small, and it holds only what the refusal log line already says
// (never a header value, token, signature or payload field), because the dashboard shows it as is.

/** The dashboard looks back over a debugging session, not an archive: 200 covers many retries of a few calls. */
export const REQUEST_LOG_CAPACITY = 200;

export interface LoggedRequest {
  /** RFC 3339, simulator clock: the time the timestamp window was judged against. */
  readonly at: string;
  readonly method: string;
  /** Path without the query string (a query may carry anything, and no gateway route uses one). */
  readonly path: string;
  readonly ip: string | undefined;
  /** The account, once its access token identified it. */
  readonly account: string | undefined;
  /** The HTTP status answered; undefined when the connection was dropped instead (a reset fault). */
  readonly status: number | undefined;
  /** 'accepted', or the error code of the refusal as the spec (or our documented assumption) names it. */
  readonly verdict: string;
  /** Why it was refused, as the refusal message says; what was created when accepted. */
  readonly reason: string;
}

export interface RequestLog {
  record(entry: LoggedRequest): void;
  /** Newest first. */
  recent(): LoggedRequest[];
}

export function createRequestLog(capacity = REQUEST_LOG_CAPACITY): RequestLog {
  if (!Number.isInteger(capacity) || capacity < 1) throw new RangeError('request log capacity must be at least 1');
  const slots: LoggedRequest[] = [];
  let next = 0;
  return {
    record(entry) {
      slots[next] = entry;
      next = (next + 1) % capacity;
    },
    recent() {
      // Until the buffer wraps, `next` is its length and the slice before it is everything in order.
      const ordered = slots.length < capacity ? [...slots] : [...slots.slice(next), ...slots.slice(0, next)];
      return ordered.reverse();
    },
  };
}
