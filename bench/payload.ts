import { BENCH_PASSWORD, BENCH_USERNAME } from './gateway.js';

// A deposit payload of spec 2.3's shape; its size sets the cost of base64, hashing and the envelope.
export const PAYLOAD = JSON.stringify({
  amount: '125.50',
  currency: 'EUR',
  gateway: 'card',
  user_id: 'user-000123',
  invoice_no: 'INV-2024-000123',
});

export const REQUEST_HEADERS: Record<string, string> = { 'content-type': 'application/json' };

export interface Target {
  readonly url: string;
  readonly headers: Record<string, string>;
  readonly body: string;
}

/** What a client of the sidecar sends: the plain payload. */
export function viaSidecar(url: string): Target {
  return { url, headers: REQUEST_HEADERS, body: PAYLOAD };
}

/**
 * The same request sent straight to the stand-in: a real bearer token from its token endpoint, signing headers
 * of realistic size (the stand-in checks presence only) and the envelope, so the direct baseline differs from
 * the sidecar path by exactly the sidecar.
 */
export async function direct(url: string): Promise<Target> {
  const res = await fetch(`${url}/api/v2/auth/token`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ grant_type: 'password', username: BENCH_USERNAME, password: BENCH_PASSWORD }),
  });
  const { access_token: token } = (await res.json()) as { access_token: string };
  return {
    url,
    headers: {
      'content-type': 'application/json',
      authorization: `Bearer ${token}`,
      'x-timestamp': String(Math.floor(Date.now() / 1000)),
      'x-nonce': '0123456789abcdef0123456789abcdef',
      'x-signature': 'A'.repeat(344),
    },
    body: JSON.stringify({ data: Buffer.from(PAYLOAD).toString('base64') }),
  };
}
