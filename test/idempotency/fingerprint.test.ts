import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { requestFingerprint } from '../../src/idempotency/fingerprint.js';

const body = Buffer.from('{"amount":"100.50","invoice_no":"INV-1"}');

describe('request fingerprint: route, query and the exact body bytes', () => {
  it('is the same for the same request', () => {
    assert.equal(requestFingerprint('/r', 'a=1', body), requestFingerprint('/r', 'a=1', Buffer.from(body)));
    assert.match(requestFingerprint('/r', '', body), /^[0-9a-f]{64}$/);
  });

  it('changes with the route, the query, or any byte of the body (even whitespace)', () => {
    const base = requestFingerprint('/r', 'a=1', body);
    assert.notEqual(requestFingerprint('/s', 'a=1', body), base);
    assert.notEqual(requestFingerprint('/r', 'a=2', body), base);
    assert.notEqual(requestFingerprint('/r', '', body), base);
    assert.notEqual(requestFingerprint('/r', 'a=1', Buffer.from('{"amount": "100.50","invoice_no":"INV-1"}')), base);
  });

  it('cannot be fooled by moving characters between the parts', () => {
    assert.notEqual(requestFingerprint('/a', 'b=1', body), requestFingerprint('/ab', '=1', body));
    assert.notEqual(requestFingerprint('/a', 'q', Buffer.from('{}')), requestFingerprint('/a', '', Buffer.from('q{}')));
  });
});
