// Pure building blocks: strict base64, URL rebuild, clock, nonce memory, token rules, allowlists, faults.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { decodeStrictBase64 } from '../../packages/simulator/src/base64.js';
import { parsePublicBase, signedUrlFor } from '../../packages/simulator/src/canonical-url.js';
import { createClock, rfc3339 } from '../../packages/simulator/src/clock.js';
import { createFaultInjector } from '../../packages/simulator/src/faults.js';
import { createAllowList, isLoopbackAddress } from '../../packages/simulator/src/ip-allow.js';
import { createNonceStore } from '../../packages/simulator/src/nonce-store.js';
import { createTokenStore } from '../../packages/simulator/src/token-store.js';

function fakeClock(): { clock: ReturnType<typeof createClock>; advance: (ms: number) => void } {
  let now = 1_763_700_000_000;
  return { clock: createClock(() => now), advance: (ms) => void (now += ms) };
}

describe('strict base64', () => {
  it('accepts canonical padded standard base64 only', () => {
    assert.deepEqual(decodeStrictBase64('aGk='), Buffer.from('hi'));
    assert.deepEqual(decodeStrictBase64('+/+/'), Buffer.from([0xfb, 0xff, 0xbf]));
    for (const bad of ['', 'aGk', '-_-_', 'aG k=', 'aGl=', 'aGk==', '====', 'aGk=\n']) {
      assert.equal(decodeStrictBase64(bad), undefined, JSON.stringify(bad));
    }
  });
});

describe('canonical URL', () => {
  it('lowercases scheme and host, drops default ports, keeps path, query and prefix as sent', () => {
    const base = parsePublicBase('HTTPS://GW.Example.com:443/Prefix/');
    assert.deepEqual(base, { origin: 'https://gw.example.com', pathPrefix: '/Prefix' });
    assert.equal(signedUrlFor(base, '/Prefix/a/%7e/?z=1&a=%2F'), 'https://gw.example.com/Prefix/a/%7e/?z=1&a=%2F');
    assert.equal(signedUrlFor(base, '/x?'), 'https://gw.example.com/x');
    assert.equal(parsePublicBase('http://127.0.0.1:80').origin, 'http://127.0.0.1');
    assert.equal(parsePublicBase('https://h:8443').origin, 'https://h:8443');
    assert.throws(() => parsePublicBase('https://h/?q=1'), /query/);
    assert.throws(() => parsePublicBase('ftp://h'), /http/);
  });
});

describe('clock', () => {
  it('shifts and sets an offset; RFC 3339 to the second', () => {
    const { clock } = fakeClock();
    const start = clock.nowSeconds();
    clock.shift(90);
    clock.shift(-30);
    assert.equal(clock.nowSeconds(), start + 60);
    clock.setOffset(-10);
    assert.equal(clock.nowSeconds(), start - 10);
    assert.equal(rfc3339(Date.UTC(2025, 10, 21, 5, 0, 0, 750)), '2025-11-21T05:00:00Z');
    assert.throws(() => clock.shift(Number.NaN));
  });
});

describe('nonce store', () => {
  it('remembers a nonce per vendor for the window, then forgets it', () => {
    const { clock, advance } = fakeClock();
    const nonces = createNonceStore(clock, 95);
    assert.equal(nonces.claim('a', 'n1'), true);
    assert.equal(nonces.claim('a', 'n1'), false);
    assert.equal(nonces.claim('b', 'n1'), true, 'another vendor may use the same nonce');
    advance(94_000);
    assert.equal(nonces.claim('a', 'n1'), false);
    advance(2_000);
    assert.equal(nonces.claim('a', 'n1'), true);
    advance(200_000);
    nonces.claim('c', 'n2');
    assert.equal(nonces.size(), 1, 'expired nonces are pruned');
  });
});

describe('token store', () => {
  const ttl = { accessSeconds: 60, refreshSeconds: 600 };

  it('rotates refresh tokens and expires tokens on the simulator clock', () => {
    const { clock, advance } = fakeClock();
    const store = createTokenStore(clock, ttl);
    const first = store.passwordLogin('v');
    const refreshed = store.refresh(first.refreshToken);
    assert.equal(refreshed.ok, true);
    assert.deepEqual(store.refresh(first.refreshToken), { ok: false, reason: 'rotated', username: 'v' });
    assert.deepEqual(store.checkAccess(first.accessToken), { ok: true, username: 'v' });
    advance(60_000);
    assert.equal(store.checkAccess(first.accessToken).ok, false);
    assert.deepEqual(store.checkAccess('x'), { ok: false, reason: 'unknown' });
  });

  it('a password login supersedes earlier access tokens of that account only', () => {
    const { clock } = fakeClock();
    const store = createTokenStore(clock, ttl);
    const old = store.passwordLogin('v');
    const other = store.passwordLogin('w');
    const fresh = store.passwordLogin('v');
    assert.deepEqual(store.checkAccess(old.accessToken), { ok: false, reason: 'superseded', username: 'v' });
    assert.equal(store.checkAccess(fresh.accessToken).ok, true);
    assert.equal(store.checkAccess(other.accessToken).ok, true);
  });
});

describe('allowlists', () => {
  it('matches addresses, CIDR ranges and IPv4-mapped IPv6', () => {
    const list = createAllowList(['10.0.0.0/8', '192.0.2.7', '2001:db8::/32']);
    assert.equal(list.allows('10.1.2.3'), true);
    assert.equal(list.allows('::ffff:192.0.2.7'), true);
    assert.equal(list.allows('192.0.2.8'), false);
    assert.equal(list.allows('2001:db8::1'), true);
    assert.equal(list.allows(undefined), false);
    assert.throws(() => createAllowList(['10.0.0.0/40']), /prefix/);
    assert.throws(() => createAllowList(['example.com']), /not an IP/);
    assert.equal(isLoopbackAddress('127.0.0.2'), true);
    assert.equal(isLoopbackAddress('::1'), true);
    assert.equal(isLoopbackAddress('192.0.2.2'), false);
  });
});

describe('fault injector', () => {
  it('consumes faults per target and validates specs', () => {
    const faults = createFaultInjector();
    faults.add({ kind: '5xx', count: 2 });
    faults.add({ kind: '401', target: 'token' });
    assert.equal(faults.take('token')?.kind, '401');
    assert.equal(faults.take('token'), undefined);
    assert.equal(faults.take('signed')?.kind, '5xx');
    assert.equal(faults.take('signed')?.kind, '5xx');
    assert.equal(faults.take('signed'), undefined);
    assert.throws(() => faults.add({ kind: 'boom' as '5xx' }), RangeError);
    assert.throws(() => faults.add({ kind: 'delay', delayMs: -1 }), RangeError);
  });
});
