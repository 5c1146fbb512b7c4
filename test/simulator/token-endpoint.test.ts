// The token endpoint over HTTP: grants, RFC 3339 fields, rotation, supersession by a new login, expiry.
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { PASSWORD, USERNAME, codeOf, login, makeKeys, send, signedPost, startWithAccount } from './support.js';
import type { RawResponse, TestKeys } from './support.js';
import type { RunningSimulator } from '@signing-sidecar/simulator';

const RFC3339 = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z$/;

function tokenRequest(sim: RunningSimulator, body: unknown, contentType = 'application/json'): Promise<RawResponse> {
  return send(sim.listenUrl, {
    path: '/api/v2/auth/token',
    headers: { 'content-type': contentType },
    body: typeof body === 'string' ? body : JSON.stringify(body),
  });
}

describe('token endpoint', () => {
  let keys: TestKeys;
  let sim: RunningSimulator;
  before(async () => {
    keys = await makeKeys();
    sim = await startWithAccount(keys, {
      accessTokenTtlSeconds: 30,
      refreshTokenTtlSeconds: 120,
      refreshTokenField: 'token',
    });
  });
  after(() => sim.close());

  it('password grant returns exactly the four fields of spec 2.1 with RFC 3339 expiries', async () => {
    const before = sim.clock.nowSeconds();
    const tokens = await login(sim);
    assert.deepEqual(Object.keys(tokens).sort(), [
      'access_token',
      'access_token_expires_at',
      'refresh_token',
      'refresh_token_expires_at',
    ]);
    assert.match(tokens.access_token_expires_at ?? '', RFC3339);
    assert.match(tokens.refresh_token_expires_at ?? '', RFC3339);
    const accessExpiry = Date.parse(tokens.access_token_expires_at ?? '') / 1000;
    assert.ok(Math.abs(accessExpiry - (before + 30)) <= 1, 'configured 30 s lifetime');
    const refreshExpiry = Date.parse(tokens.refresh_token_expires_at ?? '') / 1000;
    assert.ok(Math.abs(refreshExpiry - (before + 120)) <= 1);
  });

  it('refuses wrong credentials with 401 FAILED, the same for an unknown user', async () => {
    for (const body of [
      { grant_type: 'password', username: USERNAME, password: 'wrong' },
      { grant_type: 'password', username: 'nobody@example.com', password: PASSWORD },
    ]) {
      const res = await tokenRequest(sim, body);
      assert.equal(res.status, 401);
      assert.deepEqual(res.json(), { code: 'FAILED', message: 'invalid username or password' });
    }
  });

  it('refuses malformed token requests with 400 and a clear code', async () => {
    const cases: [unknown, string, string?][] = [
      [{ grant_type: 'client_credentials' }, 'token.grant_type.unsupported'],
      [{ username: USERNAME, password: PASSWORD }, 'token.grant_type.unsupported'],
      [{ grant_type: 'password', username: USERNAME }, 'token.request.invalid'],
      [{ grant_type: 'password', username: USERNAME, password: 123 }, 'token.request.invalid'],
      [{ grant_type: 'refresh_token', refresh_token: 'x' }, 'token.request.invalid'],
      ['{"grant_type":', 'request.body.invalid_json'],
      ['["password"]', 'request.body.invalid_json'],
    ];
    for (const [body, code] of cases) {
      const res = await tokenRequest(sim, body);
      assert.equal(res.status, 400, JSON.stringify(body));
      assert.equal(codeOf(res), code);
    }
    const form = await tokenRequest(sim, 'grant_type=password', 'application/x-www-form-urlencoded');
    assert.equal(form.status, 415);
  });

  it('refresh rotates: the new refresh token works, the old one is refused with 401 FAILED', async () => {
    const first = await login(sim);
    const refreshed = await tokenRequest(sim, { grant_type: 'refresh_token', token: first.refresh_token });
    assert.equal(refreshed.status, 200, refreshed.text);
    const second = refreshed.json();
    assert.notEqual(second.refresh_token, first.refresh_token);
    const reuse = await tokenRequest(sim, { grant_type: 'refresh_token', token: first.refresh_token });
    assert.equal(reuse.status, 401);
    assert.equal(codeOf(reuse), 'FAILED');
    const next = await tokenRequest(sim, { grant_type: 'refresh_token', token: second.refresh_token });
    assert.equal(next.status, 200);
    const accessFromRefresh = String(next.json().access_token);
    const res = await signedPost(sim, { key: keys.privateKey, token: accessFromRefresh });
    assert.equal(res.status, 200, res.text);
  });

  it('a password login invalidates every access token issued before it', async () => {
    const older = await login(sim);
    const newer = await login(sim);
    const stale = await signedPost(sim, { key: keys.privateKey, token: older.access_token ?? '' });
    assert.equal(stale.status, 401);
    assert.equal(codeOf(stale), 'FAILED');
    assert.match(String(stale.json().message), /superseded/);
    const fresh = await signedPost(sim, { key: keys.privateKey, token: newer.access_token ?? '' });
    assert.equal(fresh.status, 200, fresh.text);
  });

  it('access and refresh tokens expire on the simulator clock', async () => {
    const tokens = await login(sim);
    sim.clock.shift(31);
    try {
      const expired = await signedPost(sim, { key: keys.privateKey, token: tokens.access_token ?? '' });
      assert.equal(codeOf(expired), 'FAILED');
      assert.match(String(expired.json().message), /expired/);
      sim.clock.shift(90);
      const refresh = await tokenRequest(sim, { grant_type: 'refresh_token', token: tokens.refresh_token });
      assert.equal(refresh.status, 401);
      assert.match(String(refresh.json().message), /expired/);
    } finally {
      sim.clock.setOffset(0);
    }
  });
});
