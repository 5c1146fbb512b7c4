import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { forwardedRequestHeaders } from '../../src/config/forwarded-headers.js';
import { wrapEnvelope } from '../../src/egress/body.js';
import { forwardableRequestHeaders, forwardableResponseHeaders } from '../../src/egress/headers.js';
import { createRouter } from '../../src/egress/routes.js';

const route = createRouter(['/api/v2/transaction/init', '/api/v2/transfer-out/init']);

describe('routes: the path alone decides, the destination never changes', () => {
  it('matches POST on a configured path, keeping the query as sent', () => {
    assert.deepEqual(route('POST', '/api/v2/transaction/init?b=2&a=1'), {
      kind: 'signed',
      route: '/api/v2/transaction/init',
      target: { path: '/api/v2/transaction/init', query: 'b=2&a=1' },
    });
  });
  it('reduces an absolute-form request line to its path, whatever host it names', () => {
    const match = route('POST', 'http://evil.example:9999/api/v2/transfer-out/init?x=1');
    assert.equal(match.kind, 'signed');
    assert.deepEqual(match.kind === 'signed' && match.target, { path: '/api/v2/transfer-out/init', query: 'x=1' });
  });
  it('knows no other path: not the token endpoint, not a trailing slash, not a case variant, not "*"', () => {
    for (const target of [
      '/api/v2/auth/token',
      '/api/v2/transaction/init/',
      '/API/v2/transaction/init',
      '*',
      'http://evil.example',
    ]) {
      assert.equal(route('POST', target).kind, 'not_found', target);
    }
  });
  it('answers another method on a signed path with method_not_allowed', () => {
    assert.equal(route('GET', '/api/v2/transaction/init').kind, 'method_not_allowed');
    assert.equal(route('post', '/api/v2/transaction/init').kind, 'method_not_allowed');
  });
});

describe('envelope: the exact bytes, standard padded base64, nothing else', () => {
  it('keeps whitespace, key order and number spelling exactly as received', () => {
    const body = Buffer.from('{ "b":1.50,\n"a": "é" }');
    const envelope = wrapEnvelope(body);
    assert.equal(Buffer.from(envelope.data, 'base64').equals(body), true);
    assert.equal(envelope.json, `{"data":"${envelope.data}"}`);
    assert.deepEqual(Object.keys(JSON.parse(envelope.json) as object), ['data']);
  });
  it('pads and uses the standard alphabet (+ and /), never base64url', () => {
    const data = wrapEnvelope(Buffer.from('{"k":"\u00ff\u00fe?"}')).data;
    assert.match(data, /^[A-Za-z0-9+/]+={0,2}$/);
    assert.equal(data.length % 4, 0);
  });
  it('refuses invalid JSON, invalid UTF-8 and non-objects with stable codes', () => {
    assert.throws(() => wrapEnvelope(Buffer.from('{"a":')), { code: 'sidecar.body.invalid_json' });
    assert.throws(() => wrapEnvelope(Buffer.from([0x7b, 0x22, 0xff, 0x22, 0x3a, 0x31, 0x7d])), {
      code: 'sidecar.body.invalid_json',
    });
    for (const text of ['[]', 'null', '"x"', '42'])
      assert.throws(() => wrapEnvelope(Buffer.from(text)), { code: 'sidecar.body.not_object' });
  });
});

const DEFAULT_ALLOWED = new Set(forwardedRequestHeaders([]));

describe('headers', () => {
  it('forwards only Accept, Accept-Language, User-Agent and X-Request-Id by default', () => {
    const out = forwardableRequestHeaders(
      {
        authorization: 'Bearer x',
        'x-timestamp': '1',
        'x-nonce': 'n',
        'x-signature': 's',
        host: 'h',
        connection: 'keep-alive',
        'keep-alive': 'timeout=5',
        te: 'trailers',
        'transfer-encoding': 'chunked',
        'proxy-authorization': 'p',
        cookie: 'session=1',
        'x-forwarded-for': '10.0.0.1',
        forwarded: 'for=10.0.0.1',
        'content-length': '10',
        'content-type': 'text/plain',
        'true-client-ip': '10.0.0.2',
        'x-client-ip': '10.0.0.3',
        'cf-connecting-ip': '10.0.0.4',
        'x-host': 'internal.example',
        'x-original-url': '/admin',
        'x-http-method-override': 'DELETE',
        'x-custom': 'anything',
        'user-agent': 'svc/1.0',
        'x-request-id': 'r1',
        accept: 'application/json',
        'accept-language': 'en',
      },
      DEFAULT_ALLOWED,
    );
    assert.deepEqual(out, {
      'user-agent': 'svc/1.0',
      'x-request-id': 'r1',
      accept: 'application/json',
      'accept-language': 'en',
    });
  });
  it('forwards a header SIDECAR_FORWARD_REQUEST_HEADERS adds, unless Connection makes it hop-by-hop', () => {
    const allowed = new Set(forwardedRequestHeaders(['X-Tenant', 'Constructor']));
    const headers = { 'x-tenant': 't1', constructor: 'c', 'x-other': 'o', accept: '*/*' };
    assert.deepEqual(forwardableRequestHeaders(headers, allowed), {
      'x-tenant': 't1',
      constructor: 'c',
      accept: '*/*',
    });
    const hop = forwardableRequestHeaders({ ...headers, connection: 'keep-alive, X-Tenant' }, allowed);
    assert.deepEqual(hop, { constructor: 'c', accept: '*/*' });
  });
  it("never forwards the caller's trace context: the gateway learns nothing of internal traces", () => {
    const out = forwardableRequestHeaders(
      {
        traceparent: '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01',
        tracestate: 'internal=1',
        baggage: 'tenant=acme',
        accept: 'application/json',
      },
      DEFAULT_ALLOWED,
    );
    assert.deepEqual(out, { accept: 'application/json' });
  });
  it('passes gateway headers back, minus hop-by-hop ones and the length it no longer describes', () => {
    const out = forwardableResponseHeaders({
      'content-type': 'application/json',
      'set-cookie': ['a=1', 'b=2'],
      connection: 'keep-alive',
      'keep-alive': 'timeout=5',
      'transfer-encoding': 'chunked',
      'content-length': '3',
      'x-trace': 't',
    });
    assert.deepEqual(out, { 'content-type': 'application/json', 'set-cookie': ['a=1', 'b=2'], 'x-trace': 't' });
  });
});
