import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { buildSchema } from '../../src/config/schema.js';
import { DEADLINE_MARGIN_MS, longestRequestMs, TOKEN_WAIT_MS } from '../../src/idempotency/deadline.js';

describe('the longest possible request time (an in_progress record older than this is abandoned)', () => {
  it('is 115 s with the default settings, as docs/idempotency.md says', () => {
    const upstream = buildSchema({}).get('upstream');
    assert.equal(longestRequestMs({ tokenWaitMs: TOKEN_WAIT_MS, ...upstream }), 115_000);
  });

  it('2 x token wait + connect retry deadline + 2 x (2 x connect timeout + response timeout) + margin', () => {
    const settings = { tokenWaitMs: 1, connectTimeoutMs: 10, responseTimeoutMs: 100, connectRetryDeadlineMs: 1_000 };
    assert.equal(longestRequestMs(settings), 2 + 1_000 + 2 * (20 + 100) + DEADLINE_MARGIN_MS);
  });

  it('grows with every setting that can lengthen a request', () => {
    const base = {
      tokenWaitMs: 10_000,
      connectTimeoutMs: 5_000,
      responseTimeoutMs: 30_000,
      connectRetryDeadlineMs: 10_000,
    };
    for (const key of Object.keys(base) as Array<keyof typeof base>) {
      assert.ok(longestRequestMs({ ...base, [key]: base[key] + 1 }) > longestRequestMs(base), key);
    }
  });
});
