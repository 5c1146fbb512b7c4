import autocannon from 'autocannon';
import { PAYLOAD, REQUEST_HEADERS } from './payload.js';

export interface ThroughputResult {
  readonly requestsPerSecond: number;
  readonly total: number;
  readonly errors: number;
  readonly non2xx: number;
  readonly seconds: number;
}

/** Saturating closed-loop load: `connections` clients, each sending its next request as soon as one returns. */
export async function saturate(url: string, path: string, seconds: number, connections: number): Promise<ThroughputResult> {
  const result = await autocannon({
    url: `${url}${path}`,
    method: 'POST',
    headers: REQUEST_HEADERS,
    body: PAYLOAD,
    connections,
    pipelining: 1,
    duration: seconds,
  });
  const total = result.requests.total;
  return {
    requestsPerSecond: total / (result.duration || seconds),
    total,
    errors: result.errors + result.timeouts,
    non2xx: result.non2xx,
    seconds: result.duration,
  };
}
