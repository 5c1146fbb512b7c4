import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { parseBaseAddress } from '../../src/config/base-url.js';

describe('parseBaseAddress: plain http:// only to loopback', () => {
  for (const url of ['http://127.0.0.1:8443', 'http://127.9.9.9', 'http://localhost:1', 'http://[::1]:8080']) {
    it(`${url} is loopback and accepted`, () => assert.equal(parseBaseAddress(url).isLoopback, true));
  }
  for (const url of ['http://10.0.0.7', 'http://gateway.example.com', 'http://[::2]']) {
    it(`${url} is refused: use https://`, () => assert.throws(() => parseBaseAddress(url), /only for loopback/));
  }
  it('https:// to any host is accepted, and not loopback', () =>
    assert.equal(parseBaseAddress('https://gateway.example.com').isLoopback, false));
});
