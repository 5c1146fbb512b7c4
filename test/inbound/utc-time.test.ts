import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { request } from 'undici';
import { httpDate, isoTimestamp } from '../../src/utc-time.js';
import { withReadySidecar } from '../support/sidecar.js';

// Date's own methods are the oracle here: the sidecar only avoids calling them (src/utc-time.ts says why).
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
  it('is one, current and IMF-fixdate: on the egress listener, its refusals and the admin listener', async () => {
    await withReadySidecar({}, async ({ running }) => {
      const { proxyUrl, adminUrl } = running.sidecar;
      const answers = [
        await request(`${proxyUrl}/api/v2/transaction/init`, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: '{"amount":"1.00","currency":"EUR"}',
        }),
        await request(`${proxyUrl}/api/v2/no-such-route`, { method: 'POST', body: '{}' }),
        await request(`${adminUrl}/healthz/ready`),
        await request(`${adminUrl}/metrics`),
      ];
      for (const answer of answers) {
        await answer.body.dump();
        const date = answer.headers.date;
        assert.equal(typeof date, 'string', `one Date header (${answer.statusCode})`);
        assert.match(String(date), /^(Mon|Tue|Wed|Thu|Fri|Sat|Sun), \d\d \w{3} \d{4} \d\d:\d\d:\d\d GMT$/);
        assert.ok(Math.abs(Date.parse(String(date)) - Date.now()) < 5_000, `current: ${String(date)}`);
      }
    });
  });
});
