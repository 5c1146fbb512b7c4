import type { CheckMark } from './check-report.js';

// Spec 8: the gateway accepts timestamps from 60 s behind to 5 s ahead of its clock. Our timestamps are our
// clock, so a local clock AHEAD of the gateway's by more than 5 s gives signature.timestamp.future, and one
// BEHIND by more than 60 s gives signature.timestamp.expired. Warnings start at half of each limit.
export const MAX_AHEAD_S = 5;
export const MAX_BEHIND_S = 60;

export interface SkewSample {
  /** The gateway's `Date` header value (HTTP date, one-second resolution). */
  readonly dateHeader: string;
  /** Local clock when the request was sent and when the answer's headers arrived. */
  readonly sentMs: number;
  readonly receivedMs: number;
}

export interface SkewVerdict {
  readonly mark: CheckMark;
  readonly detail: string;
}

/**
 * Local clock minus gateway clock, in seconds (positive: we are ahead). The Date header is truncated to the
 * second, so the gateway's time is taken as the middle of that second, and ours as the middle of the round trip.
 */
export function skewSeconds(sample: SkewSample): number | undefined {
  const gatewayMs = Date.parse(sample.dateHeader);
  if (Number.isNaN(gatewayMs)) return undefined;
  const localMs = (sample.sentMs + sample.receivedMs) / 2;
  return (localMs - (gatewayMs + 500)) / 1000;
}

export function judgeSkew(sample: SkewSample): SkewVerdict {
  const skew = skewSeconds(sample);
  if (skew === undefined)
    return { mark: '✘', detail: `the gateway's Date header "${sample.dateHeader}" is not an HTTP date` };
  const precision = 0.5 + (sample.receivedMs - sample.sentMs) / 2000;
  const amount = `${Math.abs(skew).toFixed(1)} s (±${precision.toFixed(1)} s)`;
  if (skew > MAX_AHEAD_S)
    return {
      mark: '✘',
      detail: `this clock is ${amount} AHEAD of the gateway; beyond ${MAX_AHEAD_S} s every signed request fails with signature.timestamp.future: fix NTP`,
    };
  if (-skew > MAX_BEHIND_S)
    return {
      mark: '✘',
      detail: `this clock is ${amount} BEHIND the gateway; beyond ${MAX_BEHIND_S} s every signed request fails with signature.timestamp.expired: fix NTP`,
    };
  if (skew > MAX_AHEAD_S / 2)
    return { mark: '!', detail: `this clock is ${amount} ahead of the gateway (limit ${MAX_AHEAD_S} s): check NTP` };
  if (-skew > MAX_BEHIND_S / 2)
    return { mark: '!', detail: `this clock is ${amount} behind the gateway (limit ${MAX_BEHIND_S} s): check NTP` };
  const direction = skew >= 0 ? 'ahead of' : 'behind';
  return {
    mark: '✔',
    detail: `this clock is ${amount} ${direction} the gateway (allowed: ${MAX_AHEAD_S} s ahead, ${MAX_BEHIND_S} s behind)`,
  };
}
