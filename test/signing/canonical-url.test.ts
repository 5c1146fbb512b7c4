import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { parseBaseAddress } from '../../src/config/base-url.js';
import { signedUrl, splitRequestTarget, upstreamPath } from '../../src/signing/canonical-url.js';

const url = (base: string, target: string) => signedUrl(parseBaseAddress(base), splitRequestTarget(target));

describe('FULL_URL rules of spec 5.2, one case each', () => {
  it('scheme is lowercase', () =>
    assert.equal(url('HTTPS://gateway.example.com', '/p'), 'https://gateway.example.com/p'));
  it('host is lowercase', () =>
    assert.equal(url('https://GateWay.Example.COM', '/p'), 'https://gateway.example.com/p'));
  it('default port 443 is omitted for https', () =>
    assert.equal(url('https://g.example.com:443', '/p'), 'https://g.example.com/p'));
  it('default port 80 is omitted for http', () => assert.equal(url('http://127.0.0.1:80', '/p'), 'http://127.0.0.1/p'));
  it('a non-default port is kept', () =>
    assert.equal(url('https://g.example.com:8443', '/p'), 'https://g.example.com:8443/p'));
  it('the path is exactly as posted: case, encoding and dot segments untouched', () =>
    assert.equal(url('https://g.example.com', '/API/v2/./a%2fb/../c'), 'https://g.example.com/API/v2/./a%2fb/../c'));
  it('a trailing slash is kept', () =>
    assert.equal(
      url('https://g.example.com', '/api/v2/transaction/init/'),
      'https://g.example.com/api/v2/transaction/init/',
    ));
  it('an empty query is omitted with its "?"', () => {
    assert.equal(url('https://g.example.com', '/p?'), 'https://g.example.com/p');
    assert.equal(upstreamPath(parseBaseAddress('https://g.example.com'), splitRequestTarget('/p?')), '/p');
  });
  it('a non-empty query keeps "?" and is not reordered or normalised', () =>
    assert.equal(url('https://g.example.com', '/p?z=1&a=%2F&a=+&b'), 'https://g.example.com/p?z=1&a=%2F&a=+&b'));
  it('a fragment is neither signed nor sent', () => {
    assert.equal(url('https://g.example.com', '/p?a=1#frag'), 'https://g.example.com/p?a=1');
    assert.equal(upstreamPath(parseBaseAddress('https://g.example.com'), splitRequestTarget('/p#frag')), '/p');
  });
  it('a base address with a path prefix joins without a double slash', () => {
    assert.equal(url('https://h/gw', '/api/v2/transaction/init'), 'https://h/gw/api/v2/transaction/init');
    assert.equal(url('https://h/gw/', '/api/v2/transaction/init'), 'https://h/gw/api/v2/transaction/init');
    assert.equal(url('https://h/', '/api/v2/transaction/init'), 'https://h/api/v2/transaction/init');
  });
  it('the signed URL is the posted URL: origin plus the exact request-line path', () => {
    const base = parseBaseAddress('https://H.example:443/gw/');
    const target = splitRequestTarget('/api/v2/transfer-out/init?x=1');
    assert.equal(signedUrl(base, target), `${base.origin}${upstreamPath(base, target)}`);
  });
});
