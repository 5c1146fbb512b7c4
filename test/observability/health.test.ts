import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { isLoopback } from '../../src/observability/health.js';

describe('admin listener: who may call /quitquitquit', () => {
  it('accepts IPv4, IPv6 and IPv4-mapped loopback peers', () => {
    for (const address of ['127.0.0.1', '127.0.0.2', '::1', '::ffff:127.0.0.1'])
      assert.equal(isLoopback(address), true, address);
  });
  it('refuses every other peer, including pod and node addresses', () => {
    for (const address of [
      '10.1.2.3',
      '192.168.0.5',
      '::ffff:10.0.0.1',
      'fe80::1',
      '2001:db8::1',
      '0.0.0.0',
      undefined,
    ]) {
      assert.equal(isLoopback(address), false, String(address));
    }
  });
});
