import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { NONCE_PATTERN, newNonce } from '../../src/signing/nonce.js';
import { unixTimestamp } from '../../src/signing/signing-string.js';

describe('X-Nonce and X-Timestamp', () => {
  it('10,000 nonces are all 22 base64url characters without padding, and all distinct', () => {
    const seen = new Set<string>();
    for (let i = 0; i < 10_000; i++) {
      const nonce = newNonce();
      assert.match(nonce, /^[A-Za-z0-9_-]{22}$/);
      assert.match(nonce, NONCE_PATTERN);
      assert.equal(Buffer.from(nonce, 'base64url').length, 16);
      seen.add(nonce);
    }
    assert.equal(seen.size, 10_000);
  });

  it('timestamps are whole Unix seconds as decimal ASCII, not milliseconds', () => {
    assert.equal(unixTimestamp(1_763_700_000_999), '1763700000');
    assert.match(unixTimestamp(Date.now()), /^\d{10}$/);
  });
});
