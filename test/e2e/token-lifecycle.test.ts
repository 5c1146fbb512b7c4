import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { TEST_PASSWORD } from '../support/recording-gateway.js';
import { withReadySidecar } from '../support/sidecar.js';
import { depositJson } from '../support/payloads.js';

const DEPOSIT = depositJson({ amount: '10.00' });

async function post(proxyUrl: string): Promise<{ status: number; body: string }> {
  const response = await fetch(`${proxyUrl}/api/v2/transaction/init`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: DEPOSIT,
  });
  return { status: response.status, body: await response.text() };
}

describe('token lifecycle through the proxy', () => {
  it('50 concurrent 401 FAILED of one generation: one new token, each request retried exactly once with a new nonce', async () => {
    await withReadySidecar({}, async ({ gateway, running }) => {
      const superseded = gateway.issuedAccessTokens.at(-1)!;
      gateway.revokeAccessToken(superseded);
      const grantsBefore = gateway.grants.length;
      // The first answers wait until all 50 requests have arrived with the superseded token.
      gateway.holdUntil = 50;
      const answers = await Promise.all(Array.from({ length: 50 }, () => post(running.sidecar.egressUrl)));
      assert.ok(
        answers.every((a) => a.status === 201),
        'every client got the gateway success',
      );
      assert.equal(gateway.grants.length - grantsBefore, 1, 'exactly one token call');
      assert.equal(gateway.grants.at(-1)!.grant, 'refresh_token');
      assert.equal(gateway.requests.length, 100, 'each request sent exactly twice');
      const withOld = gateway.requests.filter((r) => r.headers.authorization === `Bearer ${superseded}`);
      assert.equal(withOld.length, 50);
      const nonces = new Set(gateway.requests.map((r) => r.headers['x-nonce']));
      assert.equal(nonces.size, 100, 'every attempt has its own nonce');
      const metrics = await (await fetch(`${running.sidecar.adminUrl}/metrics`)).text();
      assert.match(metrics, /signing_sidecar_retries_total\{reason="token_rejected"\} 50/);
      assert.match(metrics, /signing_sidecar_gateway_errors_total\{code="FAILED"\} 50/);
    });
  });

  it('a second 401 FAILED goes back to the client unchanged, after exactly two sends', async () => {
    await withReadySidecar({}, async ({ gateway, running }) => {
      gateway.rejectAllTokens = true;
      const answer = await post(running.sidecar.egressUrl);
      assert.equal(answer.status, 401);
      assert.deepEqual(JSON.parse(answer.body), {
        code: 'FAILED',
        message: 'access token invalid, expired or superseded',
      });
      assert.equal(gateway.requests.length, 2);
    });
  });

  it("401 FAILED and no fresh token to be had: the gateway's own 401 goes back (it did reach the gateway), sent once", async () => {
    await withReadySidecar({}, async ({ gateway, running }) => {
      gateway.rejectAllTokens = true;
      gateway.revokeRefreshTokens();
      gateway.refusePasswordLogins = true;
      const answer = await post(running.sidecar.egressUrl);
      assert.equal(answer.status, 401);
      assert.deepEqual(JSON.parse(answer.body), {
        code: 'FAILED',
        message: 'access token invalid, expired or superseded',
      });
      assert.equal(gateway.requests.length, 1);
      assert.deepEqual(
        gateway.grants.map((g) => g.grant),
        ['password', 'refresh_token', 'password'],
      );
    });
  });

  it('over several access-token lifetimes and one refresh-token lifetime, no client request sees a token error', async () => {
    await withReadySidecar(
      { SIDECAR_TOKEN_REFRESH_AHEAD_MIN_SECONDS: '1', SIDECAR_TOKEN_REFRESH_AHEAD_MAX_SECONDS: '1' },
      async ({ gateway, running }) => {
        const statuses: number[] = [];
        const until = Date.now() + 11_000;
        // Four clients in a loop, bounded in time.
        await Promise.all(
          Array.from({ length: 4 }, async () => {
            while (Date.now() < until) {
              statuses.push((await post(running.sidecar.egressUrl)).status);
              await new Promise((r) => setTimeout(r, 20));
            }
          }),
        );
        assert.ok(statuses.length > 200, `${statuses.length} requests`);
        assert.deepEqual(
          statuses.filter((s) => s !== 201),
          [],
          'no request saw anything but success',
        );
        const grants = gateway.grants.map((g) => g.grant);
        assert.ok(grants.filter((g) => g === 'refresh_token').length >= 3, `refreshed ahead: ${grants.join(',')}`);
        assert.ok(
          grants.filter((g) => g === 'password').length >= 2,
          `logged in again at refresh expiry: ${grants.join(',')}`,
        );
        const logs = running.logs.text;
        assert.equal(logs.includes(TEST_PASSWORD), false);
        for (const token of gateway.issuedAccessTokens) assert.equal(logs.includes(token), false);
        for (const g of gateway.grants) if (g.refreshToken) assert.equal(logs.includes(g.refreshToken), false);
        assert.match(logs, /"event":"token.granted","grant":"refresh_token"/);
      },
      (g) => {
        g.accessTtlSeconds = 3;
        g.refreshTtlSeconds = 8;
      },
    );
  });
});
