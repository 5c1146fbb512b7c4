// A shiftable clock: tests and vendors provoke `signature.timestamp.expired/future` and token expiry by moving
// the simulator's notion of "now" instead of waiting or changing the machine's time.
export function createClock(realNowMs = Date.now) {
    let offsetMs = 0;
    const assertFinite = (seconds) => {
        if (!Number.isFinite(seconds))
            throw new RangeError('clock offset must be a finite number of seconds');
    };
    return {
        nowMs: () => realNowMs() + offsetMs,
        nowSeconds: () => Math.floor((realNowMs() + offsetMs) / 1000),
        shift(seconds) {
            assertFinite(seconds);
            offsetMs += Math.round(seconds * 1000);
        },
        setOffset(seconds) {
            assertFinite(seconds);
            offsetMs = Math.round(seconds * 1000);
        },
        offsetSeconds: () => offsetMs / 1000,
    };
}
/** RFC 3339 in UTC, to the second: what spec 2.1 asks for in the token expiry fields. */
export function rfc3339(ms) {
    return new Date(ms).toISOString().replace(/\.\d{3}Z$/, 'Z');
}
