import assert from 'node:assert/strict';
import type { IncomingHttpHeaders } from 'node:http';
import { describe, it } from 'node:test';
import { createCallerCheck, type CallerRule } from '../../src/egress/caller-check.js';

function verdict(rule: CallerRule, headers: IncomingHttpHeaders): string {
  return createCallerCheck(rule)(headers)?.code ?? 'accepted';
}

const LOOPBACK: CallerRule = { listenHost: '127.0.0.1', allowedHosts: [] };

describe('caller check: Host names this sidecar, no browser made the request', () => {
  it('on loopback: localhost and loopback addresses, with or without port, or no Host at all (HTTP/1.0)', () => {
    for (const host of [
      '127.0.0.1',
      '127.0.0.1:8080',
      '127.9.9.9:1',
      'localhost',
      'LocalHost:8080',
      '[::1]',
      '[::1]:8080',
      '[0:0:0:0:0:0:0:1]:8080',
      '[::ffff:127.0.0.1]:8080',
    ]) {
      assert.equal(verdict(LOOPBACK, { host }), 'accepted', host);
    }
    assert.equal(verdict(LOOPBACK, {}), 'accepted');
  });

  it('on loopback: any other name or address, or a malformed Host, is refused as forbidden_host', () => {
    for (const host of [
      'attacker.example',
      'attacker.example:8080',
      'localhost.',
      'localhost.attacker.example',
      '127.0.0.1.nip.io:8080',
      '10.0.0.5:8080',
      '[::2]:8080',
      '[localhost]',
      '[::1',
      '127.0.0.1:80x',
      '127.0.0.1:8080:1',
      '',
    ]) {
      assert.equal(verdict(LOOPBACK, { host }), 'sidecar.request.forbidden_host', JSON.stringify(host));
    }
  });

  it('a name in SIDECAR_LISTEN_ALLOWED_HOSTS is accepted, in any case and with any port', () => {
    const rule = { listenHost: '127.0.0.1', allowedHosts: ['payments-sidecar', '10.0.0.5', '::2'] };
    for (const host of ['payments-sidecar', 'Payments-Sidecar:8080', '10.0.0.5:8080', '[::2]:8080']) {
      assert.equal(verdict(rule, { host }), 'accepted', host);
    }
    assert.equal(verdict(rule, { host: 'payments-sidecar.attacker.example' }), 'sidecar.request.forbidden_host');
  });

  it('outside loopback: any IP address and the listen host itself too, no other name', () => {
    const wildcard = { listenHost: '0.0.0.0', allowedHosts: ['payments-sidecar.payments.svc'] };
    for (const host of ['10.1.2.3:8080', '[fd00::1]:8080', 'localhost:8080', 'payments-sidecar.payments.svc:8080']) {
      assert.equal(verdict(wildcard, { host }), 'accepted', host);
    }
    assert.equal(verdict(wildcard, { host: 'attacker.example:8080' }), 'sidecar.request.forbidden_host');
    const named = { listenHost: 'Sidecar.Internal', allowedHosts: [] };
    assert.equal(verdict(named, { host: 'sidecar.internal:8080' }), 'accepted');
    assert.equal(verdict(named, { host: 'attacker.example:8080' }), 'sidecar.request.forbidden_host');
  });

  it('refuses any Origin, and Sec-Fetch-Site other than none; Sec-Fetch-Mode alone (Node fetch) passes', () => {
    const host = '127.0.0.1:8080';
    for (const origin of ['http://evil.example', 'null', `http://${host}`]) {
      assert.equal(verdict(LOOPBACK, { host, origin }), 'sidecar.request.browser_origin', origin);
    }
    for (const site of ['cross-site', 'same-site', 'same-origin', 'bogus']) {
      assert.equal(verdict(LOOPBACK, { host, 'sec-fetch-site': site }), 'sidecar.request.browser_origin', site);
    }
    assert.equal(verdict(LOOPBACK, { host, 'sec-fetch-site': 'none' }), 'accepted');
    assert.equal(verdict(LOOPBACK, { host, 'sec-fetch-mode': 'cors' }), 'accepted');
  });

  it('a refusal promises that nothing was sent: retryable, 421 for Host, 403 for a browser', () => {
    const check = createCallerCheck(LOOPBACK);
    const host = check({ host: 'attacker.example' });
    const browser = check({ origin: 'http://evil.example' });
    assert.deepEqual([host?.status, host?.retryable], [421, true]);
    assert.deepEqual([browser?.status, browser?.retryable], [403, true]);
  });
});
