// Review fixes over HTTP: check order (firewall before faults and routes, allowlist before password), strict
// parsing (timestamps, duplicate keys, BOM, header size), the timestamp window's exact edges, control API guards.
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { startSimulator } from '@signing-sidecar/simulator';
import { PASSWORD, USERNAME, b64, codeOf, rawExchange, login, makeKeys, send, signedPost } from './support.js';
import type { RawResponse, TestKeys } from './support.js';
import type { RunningSimulator } from '@signing-sidecar/simulator';

const OTHER = 'other@example.com';
const json = { 'content-type': 'application/json' };

function token(sim: RunningSimulator, body: unknown, localAddress?: string): Promise<RawResponse> {
  return send(sim.listenUrl, { path: '/api/v2/auth/token', headers: json, body: JSON.stringify(body), localAddress });
}

/** Moves the simulator clock to just after a second boundary, leaving ~950 ms before nowSeconds() ticks. */
function alignToSecondStart(sim: RunningSimulator): void {
  sim.clock.setOffset(((1050 - (Date.now() % 1000)) % 1000) / 1000);
}

describe('hardening', () => {
  let keys: TestKeys;
  let sim: RunningSimulator;
  let access: string;
  before(async () => {
    keys = await makeKeys();
    sim = await startSimulator({
      accounts: [
        { username: USERNAME, password: PASSWORD, publicKeyPem: keys.publicKeyPem, allowIps: ['127.0.0.1'] },
        { username: OTHER, password: 'other-pw', publicKeyPem: keys.publicKeyPem, allowIps: ['127.0.0.2'] },
      ],
    });
    access = (await login(sim)).access_token ?? '';
  });
  after(() => sim.close());

  it('applies the firewall before faults and before route lookup under /api/', async () => {
    sim.faults.inject({ kind: '5xx', target: 'any', count: 3 });
    const signed = await signedPost(sim, { key: keys.privateKey, token: access, localAddress: '127.0.0.3' });
    assert.equal(signed.status, 403, signed.text);
    assert.equal(codeOf(signed), 'ip.forbidden');
    const tok = await token(sim, { grant_type: 'password', username: USERNAME, password: PASSWORD }, '127.0.0.3');
    assert.equal(codeOf(tok), 'ip.forbidden');
    const unknown = await send(sim.listenUrl, { path: '/api/v2/nothing', localAddress: '127.0.0.3' });
    assert.equal(codeOf(unknown), 'ip.forbidden');
    assert.equal(sim.faults.pending()[0]?.remaining, 3, 'a blocked source does not consume a fault');
    sim.faults.clear();
    assert.equal((await send(sim.listenUrl, { path: '/api/v2/nothing' })).status, 404);
  });

  it("checks the account's allowlist before its password on the token endpoint", async () => {
    // 127.0.0.2 is allowed for OTHER only: right and wrong passwords for USERNAME must look the same from there.
    for (const password of [PASSWORD, 'wrong']) {
      const res = await token(sim, { grant_type: 'password', username: USERNAME, password }, '127.0.0.2');
      assert.equal(res.status, 403, password);
      assert.equal(codeOf(res), 'ip.forbidden');
    }
    const own = await token(sim, { grant_type: 'password', username: OTHER, password: 'other-pw' }, '127.0.0.2');
    assert.equal(own.status, 200, own.text);
  });

  it('accepts timestamps exactly 60 s behind and 5 s ahead, refuses 61 s and 6 s', async () => {
    const cases: [number, number, string | undefined][] = [
      [-60, 200, undefined],
      [-61, 401, 'signature.timestamp.expired'],
      [5, 200, undefined],
      [6, 401, 'signature.timestamp.future'],
    ];
    try {
      for (const [delta, status, code] of cases) {
        alignToSecondStart(sim);
        const timestamp = String(sim.clock.nowSeconds() + delta);
        const res = await signedPost(sim, { key: keys.privateKey, token: access, timestamp });
        assert.equal(res.status, status, `${delta}: ${res.text}`);
        if (code !== undefined) assert.equal(codeOf(res), code, String(delta));
      }
    } finally {
      sim.clock.setOffset(0);
    }
  });

  it('refuses a timestamp with leading zeros as malformed', async () => {
    const res = await signedPost(sim, { key: keys.privateKey, token: access, timestamp: `0${sim.clock.nowSeconds()}` });
    assert.equal(res.status, 401);
    assert.equal(codeOf(res), 'signature.header.invalid');
  });

  it('refuses an envelope with "data" twice, even when one of them is correctly signed', async () => {
    const data = b64({ amount: '1.00', currency: 'USD', user_id: 'u', invoice_no: 'i' });
    for (const body of [`{"data":"e30=","data":"${data}"}`, `{"data":"${data}","\\u0064ata":"${data}"}`]) {
      const res = await signedPost(sim, { key: keys.privateKey, token: access, data, body });
      assert.equal(res.status, 400, res.text);
      assert.equal(codeOf(res), 'envelope.invalid');
    }
  });

  it('refuses a UTF-8 byte order mark before a JSON body', async () => {
    const data = b64({ amount: '1.00', currency: 'USD', user_id: 'u', invoice_no: 'i' });
    const signed = await signedPost(sim, {
      key: keys.privateKey,
      token: access,
      data,
      body: `\ufeff{"data":"${data}"}`,
    });
    assert.equal(codeOf(signed), 'request.body.invalid_json');
    const login = await send(sim.listenUrl, {
      path: '/api/v2/auth/token',
      headers: json,
      body: `\ufeff${JSON.stringify({ grant_type: 'password', username: USERNAME, password: PASSWORD })}`,
    });
    assert.equal(codeOf(login), 'request.body.invalid_json');
  });

  it('answers oversized headers with 431', async () => {
    const res = await rawExchange(
      sim.listenUrl,
      `POST /api/v2/auth/token HTTP/1.1\r\nHost: x\r\nX-Big: ${'a'.repeat(20_000)}\r\nContent-Length: 0\r\n\r\n`,
    );
    assert.match(res, /^HTTP\/1\.1 431/);
  });

  it('bounds the clock offset to ±10 years and keeps serving', async () => {
    for (const body of [{ offset_seconds: 1e300 }, { offset_seconds: -4e8 }, { shift_seconds: 4e8 }]) {
      const res = await send(sim.listenUrl, { path: '/_sim/clock', headers: json, body: JSON.stringify(body) });
      assert.equal(res.status, 400, JSON.stringify(body));
      assert.equal(codeOf(res), 'sim.clock.invalid');
    }
    assert.equal(sim.clock.offsetSeconds(), 0);
    const ok = await send(sim.listenUrl, { path: '/_sim/clock', headers: json, body: '{"offset_seconds":315000000}' });
    assert.equal(ok.status, 200, ok.text);
    assert.equal((await send(sim.listenUrl, { method: 'GET', path: '/_sim/health' })).status, 200);
    sim.clock.setOffset(0);
  });

  it('requires application/json on state-changing control routes (no simple cross-origin requests)', async () => {
    const cases: [string, string, Record<string, string>][] = [
      ['POST', '/_sim/clock', { 'content-type': 'text/plain' }],
      ['POST', '/_sim/faults', { 'content-type': 'application/x-www-form-urlencoded' }],
      ['POST', '/_sim/transactions/txn_00/complete', {}],
      ['DELETE', '/_sim/faults', {}],
    ];
    for (const [method, path, headers] of cases) {
      const body = method === 'DELETE' ? undefined : '{"offset_seconds":100,"kind":"5xx"}';
      const res = await send(sim.listenUrl, { method, path, headers, body });
      assert.equal(res.status, 415, `${method} ${path}`);
      assert.equal(codeOf(res), 'request.content_type.invalid');
    }
    assert.equal(sim.clock.offsetSeconds(), 0);
    assert.deepEqual(sim.faults.pending(), []);
    assert.equal((await send(sim.listenUrl, { method: 'GET', path: '/_sim/faults' })).status, 200);
  });

  it('does not echo the grant_type value', async () => {
    const res = await token(sim, { grant_type: 'hunter2-secret' });
    assert.equal(codeOf(res), 'token.grant_type.unsupported');
    assert.doesNotMatch(String(res.json().message), /hunter2/);
    assert.match(String(res.json().message), /a string/);
  });
});
