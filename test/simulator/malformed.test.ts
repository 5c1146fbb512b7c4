// Hand-built malformed requests: each refused with the right status and code, and the simulator keeps serving.
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { codeOf, rawExchange, login, makeKeys, send, signedPost, startWithAccount } from './support.js';
import type { RawRequest, TestKeys } from './support.js';
import type { RunningSimulator } from '@signing-sidecar/simulator';

describe('malformed requests', () => {
  let keys: TestKeys;
  let sim: RunningSimulator;
  let token: string;
  before(async () => {
    keys = await makeKeys();
    sim = await startWithAccount(keys, { maxBodyBytes: 64 * 1024 });
    token = (await login(sim)).access_token ?? '';
  });
  after(() => sim.close());

  it('refuses each with the right status and code', async () => {
    const signedHeaders = (): Record<string, string> => {
      const ts = String(sim.clock.nowSeconds());
      return {
        authorization: `Bearer ${token}`,
        'x-timestamp': ts,
        'x-nonce': `n${Date.now()}abcdefghijklmnop`,
        'x-signature': 'AAAA',
      };
    };
    const json = { 'content-type': 'application/json' };
    const cases: [string, RawRequest, number, string][] = [
      ['unknown path', { method: 'POST', path: '/api/v2/nothing' }, 404, 'request.route.not_found'],
      ['v1 path', { method: 'POST', path: '/api/v1/transaction/init' }, 404, 'request.route.not_found'],
      [
        'GET on signed endpoint',
        { method: 'GET', path: '/api/v2/transaction/init' },
        405,
        'request.method.not_allowed',
      ],
      ['PUT on token endpoint', { method: 'PUT', path: '/api/v2/auth/token' }, 405, 'request.method.not_allowed'],
      [
        'token: invalid JSON',
        { path: '/api/v2/auth/token', headers: json, body: '{oops' },
        400,
        'request.body.invalid_json',
      ],
      [
        'token: invalid UTF-8',
        { path: '/api/v2/auth/token', headers: json, body: Buffer.from([0x7b, 0xff, 0x7d]) },
        400,
        'request.body.invalid_json',
      ],
      ['token: no content type', { path: '/api/v2/auth/token', body: '{}' }, 415, 'request.content_type.invalid'],
      [
        'token: body too large',
        { path: '/api/v2/auth/token', headers: json, body: 'x'.repeat(200_000) },
        413,
        'request.body.too_large',
      ],
      [
        'signed: text/plain',
        {
          path: '/api/v2/transaction/init',
          headers: { ...signedHeaders(), 'content-type': 'text/plain' },
          body: '{"data":"e30="}',
        },
        415,
        'request.content_type.invalid',
      ],
      [
        'signed: not JSON',
        { path: '/api/v2/transaction/init', headers: { ...signedHeaders(), ...json }, body: 'data=e30=' },
        400,
        'request.body.invalid_json',
      ],
      [
        'signed: JSON array',
        { path: '/api/v2/transaction/init', headers: { ...signedHeaders(), ...json }, body: '[]' },
        400,
        'request.body.invalid_json',
      ],
      [
        'signed: data is a number',
        { path: '/api/v2/transaction/init', headers: { ...signedHeaders(), ...json }, body: '{"data":5}' },
        400,
        'envelope.invalid',
      ],
      [
        'signed: raw payload without envelope',
        { path: '/api/v2/transaction/init', headers: { ...signedHeaders(), ...json }, body: '{"amount":"1.00"}' },
        400,
        'envelope.invalid',
      ],
      [
        'signed: body too large',
        {
          path: '/api/v2/transaction/init',
          headers: { ...signedHeaders(), ...json },
          body: `{"data":"${'A'.repeat(100_000)}"}`,
        },
        413,
        'request.body.too_large',
      ],
      [
        'signed: signature is base64url',
        {
          path: '/api/v2/transaction/init',
          headers: { ...signedHeaders(), ...json, 'x-signature': 'ab-_' },
          body: '{"data":"e30="}',
        },
        401,
        'signature.header.invalid',
      ],
      [
        'signed: signature unpadded',
        {
          path: '/api/v2/transaction/init',
          headers: { ...signedHeaders(), ...json, 'x-signature': 'abc' },
          body: '{"data":"e30="}',
        },
        401,
        'signature.header.invalid',
      ],
      [
        'signed: garbage signature',
        { path: '/api/v2/transaction/init', headers: { ...signedHeaders(), ...json }, body: '{"data":"e30="}' },
        401,
        'signature.verify.failed',
      ],
      ['control: unknown route', { method: 'GET', path: '/_sim/nothing' }, 404, 'request.route.not_found'],
      [
        'control: bad status',
        { path: '/_sim/transactions/txn_00/complete', headers: json, body: '{"status":"DONE"}' },
        400,
        'sim.status.invalid',
      ],
    ];
    for (const [name, request, status, code] of cases) {
      const res = await send(sim.listenUrl, request);
      assert.equal(res.status, status, `${name}: ${res.text}`);
      assert.equal(codeOf(res), code, name);
      assert.match(String(res.headers['content-type']), /application\/json/, name);
    }
  });

  it('answers unparsable HTTP and absolute-form targets without crashing', async () => {
    const garbage = await rawExchange(sim.listenUrl, 'THIS IS NOT HTTP\r\n\r\n');
    assert.match(garbage, /^HTTP\/1\.1 400/);
    const absolute = await rawExchange(
      sim.listenUrl,
      'POST http://evil.example/api/v2/transaction/init HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nConnection: close\r\n\r\n',
    );
    assert.match(absolute, /^HTTP\/1\.1 400/);
    assert.match(absolute, /request\.target\.invalid/);
  });

  it('still serves a valid signed request afterwards', async () => {
    const res = await signedPost(sim, { key: keys.privateKey, token });
    assert.equal(res.status, 200, res.text);
  });
});
