import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { request as httpRequest } from 'node:http';
import { httpDate, isoTimestamp } from '../../src/time/utc-time.js';
import type { RunningSidecar } from '../../src/app.js';
import { makeKeys } from '../support/keys.js';
import { withReadySidecar } from '../support/sidecar.js';

// Date's own methods are the oracle here: the sidecar only avoids calling them (src/time/utc-time.ts says why).
const YEAR_MS = 365.2425 * 24 * 3600 * 1000;
const EDGES = [
  0,
  Date.UTC(2024, 1, 29, 23, 59, 59, 999), // a leap day's last millisecond
  Date.UTC(2026, 11, 31, 23, 59, 59, 999),
  Date.UTC(2100, 2, 1), // 2100 is not a leap year
  Date.UTC(9999, 11, 31, 23, 59, 59, 999),
  Date.UTC(10_000, 0, 1), // past four digits: the extended form
  new Date(0).setUTCFullYear(-1, 5, 15), // setUTCFullYear: Date.UTC reads years 0-99 as 1900-1999
  new Date(0).setUTCFullYear(0, 0, 1),
  -1, // the millisecond before the epoch
];
/** Times spread over the years 1970-2500, each with a millisecond part. */
const spread = (count: number): number[] =>
  Array.from({ length: count }, (_, i) => Math.floor((i * 530 * YEAR_MS) / count) + ((i * 7919) % 1000));

describe('isoTimestamp', () => {
  it('writes what toISOString writes, edges and extended years included', () => {
    for (const ms of [...EDGES, ...spread(5_000)]) assert.equal(isoTimestamp(ms), new Date(ms).toISOString(), `${ms}`);
  });

  it('refuses what is not a time, as toISOString does', () => {
    assert.throws(() => isoTimestamp(Number.NaN), RangeError);
    assert.throws(() => isoTimestamp(8.64e15 + 1), RangeError);
  });
});

describe('httpDate', () => {
  it("writes RFC 9110's IMF-fixdate, as toUTCString does, for the second of the time given", () => {
    for (const ms of [...EDGES.filter((t) => t >= 0 && t < Date.UTC(10_000, 0, 1)), ...spread(5_000)]) {
      assert.equal(httpDate(ms), new Date(Math.floor(ms / 1000) * 1000).toUTCString(), `${ms}`);
    }
  });

  it('is the same text within a second and the next one after it', () => {
    const second = Date.UTC(2026, 10, 27, 4, 5, 6);
    assert.equal(httpDate(second), 'Fri, 27 Nov 2026 04:05:06 GMT');
    assert.equal(httpDate(second + 999), 'Fri, 27 Nov 2026 04:05:06 GMT');
    assert.equal(httpDate(second + 1000), 'Fri, 27 Nov 2026 04:05:07 GMT');
  });
});

describe('the Date header of every answer', () => {
  /** The answers of the three listeners: a payment, refusals, probes, a scrape, and Node's case, an unmet Expect. */
  async function answers(sidecar: RunningSidecar): Promise<Array<{ what: string; status: number; date: unknown }>> {
    const { egressUrl, adminUrl, postbackUrl } = sidecar;
    assert.ok(postbackUrl !== undefined, 'the postback receiver listens');
    const payment = { 'content-type': 'application/json' };
    const asked: Array<[string, string, string, Record<string, string>]> = [
      ['payment', 'POST', `${egressUrl}/api/v2/transaction/init`, payment],
      ['egress refusal', 'POST', `${egressUrl}/api/v2/no-such-route`, payment],
      ['egress, Expect: foo', 'POST', `${egressUrl}/api/v2/transaction/init`, { ...payment, expect: 'foo' }],
      ['readiness', 'GET', `${adminUrl}/healthz/ready`, {}],
      ['metrics', 'GET', `${adminUrl}/metrics`, {}],
      ['admin, Expect: foo', 'GET', `${adminUrl}/healthz/ready`, { expect: 'foo' }],
      ['postback refusal', 'POST', `${postbackUrl}/`, payment],
      ['postback, Expect: foo', 'POST', `${postbackUrl}/`, { ...payment, expect: 'foo' }],
    ];
    const answered = [];
    for (const [what, method, url, headers] of asked) {
      const { status, date } = await ask(method, url, headers, method === 'POST' ? '{"amount":"1.00"}' : undefined);
      answered.push({ what, status, date });
    }
    return answered;
  }

  it('is one, current and IMF-fixdate on every listener, its refusals and an unmet Expect included', async () => {
    await withPostbackSidecar(async (sidecar) => {
      const answered = await answers(sidecar);
      assert.deepEqual(
        answered.filter((a) => a.what.includes('Expect')).map((a) => a.status),
        [417, 417, 417],
      );
      for (const { what, date } of answered) {
        assert.equal(typeof date, 'string', `one Date header: ${what}`);
        assert.match(String(date), /^(Mon|Tue|Wed|Thu|Fri|Sat|Sun), \d\d \w{3} \d{4} \d\d:\d\d:\d\d GMT$/, what);
        assert.ok(Math.abs(Date.parse(String(date)) - Date.now()) < 5_000, `current: ${what} ${String(date)}`);
      }
    });
  });

  it("is the sidecar's own, not Node's (which reads the time zone through ICU), but for a gateway's answer", async (t) => {
    await withPostbackSidecar(async (sidecar) => {
      // The sidecar reads Date.now for its Date; Node's own header reads the clock itself. A minute in the future
      // is in no token's way.
      const later = Date.now() + 60_000;
      t.mock.method(Date, 'now', () => later);
      const answered = await answers(sidecar);
      t.mock.restoreAll();
      const ours = new Date(Math.floor(later / 1000) * 1000).toUTCString();
      for (const { what, date } of answered) {
        if (what === 'payment') assert.notEqual(date, ours, 'the gateway answer keeps the gateway Date');
        else assert.equal(date, ours, what);
      }
    });
  });
});

/** A sidecar with its postback receiver on, ready (holding a token). */
async function withPostbackSidecar(body: (sidecar: RunningSidecar) => Promise<void>): Promise<void> {
  const gatewayKeys = await makeKeys();
  const postbacks = {
    SIDECAR_POSTBACK_FORWARD_URL: 'http://127.0.0.1:9/postbacks',
    SIDECAR_POSTBACK_PUBLIC_URL: 'https://merchant.example/postbacks',
    SIDECAR_POSTBACK_PUBLIC_KEY_FILE: gatewayKeys.publicKeyFile,
    SIDECAR_POSTBACK_LISTEN_HOST: '127.0.0.1',
    SIDECAR_POSTBACK_LISTEN_PORT: '0',
  };
  await withReadySidecar(postbacks, ({ running }) => body(running.sidecar));
}

/** node:http, since undici refuses to send Expect. */
function ask(
  method: string,
  url: string,
  headers: Record<string, string>,
  body?: string,
): Promise<{ status: number; date: unknown }> {
  return new Promise((resolve, reject) => {
    const req = httpRequest(url, { method, headers, agent: false, timeout: 10_000 }, (res) => {
      res.resume();
      res.once('end', () => resolve({ status: res.statusCode ?? 0, date: res.headers.date }));
    });
    req.once('timeout', () => req.destroy(new Error(`no answer: ${method} ${url}`)));
    req.once('error', reject);
    req.end(body);
  });
}
