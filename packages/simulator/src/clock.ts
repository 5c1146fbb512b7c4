// A shiftable clock: tests and vendors provoke `signature.timestamp.expired/future` and token expiry by moving
// the simulator's notion of "now" instead of waiting or changing the machine's time.

export interface SimClock {
  /** Milliseconds since the epoch, as the simulator sees it. */
  nowMs(): number;
  /** Whole seconds since the epoch, as the simulator sees it. */
  nowSeconds(): number;
  /** Move the clock by `seconds` relative to its current offset (negative moves it back). */
  shift(seconds: number): void;
  /** Set the absolute offset from the real clock, in seconds. */
  setOffset(seconds: number): void;
  offsetSeconds(): number;
}

/**
 * Ten years either way covers every token lifetime and timestamp window worth testing. Beyond it, dates leave the
 * range `Date` can format (1e300 s), and every route would answer 500 instead of the one bad request a 400.
 */
export const MAX_CLOCK_OFFSET_SECONDS = 10 * 366 * 24 * 3600;

export function createClock(realNowMs: () => number = Date.now): SimClock {
  let offsetMs = 0;
  const checked = (ms: number): number => {
    if (!Number.isFinite(ms) || Math.abs(ms) > MAX_CLOCK_OFFSET_SECONDS * 1000) {
      throw new RangeError(`clock offset must be a number of seconds within ±${MAX_CLOCK_OFFSET_SECONDS} (10 years)`);
    }
    return ms;
  };
  return {
    nowMs: () => realNowMs() + offsetMs,
    nowSeconds: () => Math.floor((realNowMs() + offsetMs) / 1000),
    shift(seconds) {
      offsetMs = checked(offsetMs + Math.round(seconds * 1000));
    },
    setOffset(seconds) {
      offsetMs = checked(Math.round(seconds * 1000));
    },
    offsetSeconds: () => offsetMs / 1000,
  };
}

/** RFC 3339 in UTC, to the second: what spec 2.1 asks for in the token expiry fields. */
export function rfc3339(ms: number): string {
  return new Date(ms).toISOString().replace(/\.\d{3}Z$/, 'Z');
}
