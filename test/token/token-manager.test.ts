import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { Secret } from '../../src/config/secret.js';
import { createLogger } from '../../src/observability/log.js';
import { SidecarMetrics } from '../../src/observability/metrics.js';
import type { TokenClient } from '../../src/token/token-client.js';
import { TokenManager } from '../../src/token/token-manager.js';
import type { GrantResult } from '../../src/token/token-set.js';
import { CapturedOutput } from '../support/sidecar.js';
import { grantNumber } from './fleet-support.js';
import { waitFor } from '../support/wait-for.js';

/** A token endpoint stand-in with a controllable monotonic clock and a count of every call. */
class FakeTokenClient implements TokenClient {
  calls: Array<{ grant: 'password' | 'refresh_token'; refreshToken?: string }> = [];
  next: Array<GrantResult['kind'] | 'failed-sent'> = [];
  private serial = 0;
  latencyMs = 20;
  accessTtlMs = 10_000;

  passwordGrant(): Promise<GrantResult> {
    this.calls.push({ grant: 'password' });
    return this.answer();
  }
  refreshGrant(refreshToken: Secret): Promise<GrantResult> {
    this.calls.push({ grant: 'refresh_token', refreshToken: refreshToken.reveal() });
    return this.answer();
  }
  private async answer(): Promise<GrantResult> {
    await new Promise((r) => setTimeout(r, this.latencyMs));
    const kind = this.next.shift() ?? 'granted';
    if (kind === 'rejected') return { kind, status: 401, code: 'FAILED' };
    if (kind === 'failed') return { kind, sent: false, reason: 'ECONNREFUSED' };
    if (kind === 'failed-sent') return { kind: 'failed', sent: true, reason: 'ECONNRESET after send' };
    return grantNumber(++this.serial, this.accessTtlMs);
  }
}

function manager(client: FakeTokenClient, clock: { t: number }, logs = new CapturedOutput()) {
  const metrics = new SidecarMetrics({ version: 't', environment: 'staging', keyFingerprint: 'f' });
  const tokens = new TokenManager(
    client,
    {
      refreshAheadMinSeconds: 60,
      refreshAheadMaxSeconds: 120,
      backoffMaxMs: 200,
      backoffBaseMs: 20,
      monotonicNow: () => clock.t,
    },
    metrics,
    createLogger('debug', logs),
  );
  return { tokens, metrics, logs };
}

describe('token manager: single flight and generations', () => {
  it('200 concurrent requests at token expiry cause exactly one token call', async () => {
    const client = new FakeTokenClient();
    const clock = { t: 0 };
    const { tokens } = manager(client, clock);
    const first = await tokens.token();
    assert.equal(client.calls.length, 1);
    clock.t += 10_000; // the access token has now expired
    const got = await Promise.all(Array.from({ length: 200 }, () => tokens.token()));
    assert.equal(client.calls.length, 2);
    assert.equal(client.calls[1]!.grant, 'refresh_token');
    assert.ok(got.every((t) => t.generation === first.generation + 1));
    tokens.stop();
  });

  it('50 concurrent rejections of one generation fetch exactly one new token', async () => {
    const client = new FakeTokenClient();
    const clock = { t: 0 };
    const { tokens } = manager(client, clock);
    const rejected = await tokens.token();
    const fresh = await Promise.all(Array.from({ length: 50 }, () => tokens.tokenAfterRejection(rejected.generation)));
    assert.equal(client.calls.length, 2);
    assert.ok(fresh.every((t) => t.generation === rejected.generation + 1 && t.accessToken.reveal() === 'access-2'));
    // A late rejection of the old generation does not fetch again.
    assert.equal((await tokens.tokenAfterRejection(rejected.generation)).generation, rejected.generation + 1);
    assert.equal(client.calls.length, 2);
    tokens.stop();
  });

  it('always refreshes with the newest refresh token and never sends one twice', async () => {
    const client = new FakeTokenClient();
    const clock = { t: 0 };
    const { tokens } = manager(client, clock);
    for (let i = 0; i < 5; i++) {
      const held = await tokens.token();
      clock.t += 10_000;
      await tokens.token();
      assert.equal(client.calls.at(-1)!.refreshToken, held.refreshToken.reveal());
    }
    const sent = client.calls.filter((c) => c.grant === 'refresh_token').map((c) => c.refreshToken);
    assert.equal(new Set(sent).size, sent.length);
    tokens.stop();
  });

  it('a rejected refresh falls back to a password login', async () => {
    const client = new FakeTokenClient();
    const clock = { t: 0 };
    const { tokens } = manager(client, clock);
    await tokens.token();
    clock.t += 10_000;
    client.next.push('rejected');
    const token = await tokens.token();
    assert.deepEqual(
      client.calls.map((c) => c.grant),
      ['password', 'refresh_token', 'password'],
    );
    assert.equal(token.generation, 2);
    tokens.stop();
  });

  it('a refresh sent without an answer is never sent again, even when the fallback login fails too', async () => {
    const client = new FakeTokenClient();
    const clock = { t: 0 };
    const { tokens } = manager(client, clock);
    const held = await tokens.token();
    clock.t += 10_000;
    client.next.push('failed-sent', 'failed', 'granted');
    await assert.rejects(tokens.token(), { code: 'sidecar.token.unavailable' });
    await waitFor('the retry after backoff', () => client.calls.length === 4);
    const refreshes = client.calls.filter((c) => c.refreshToken === held.refreshToken.reveal());
    assert.equal(refreshes.length, 1, 'the possibly consumed refresh token went out once');
    assert.deepEqual(
      client.calls.map((c) => c.grant),
      ['password', 'refresh_token', 'password', 'password'],
    );
    await waitFor('a token again', () => tokens.hasValidToken());
    tokens.stop();
  });

  it('a network error while the token is still valid retries the refresh with backoff, without a login', async () => {
    const client = new FakeTokenClient();
    const clock = { t: 0 };
    const { tokens } = manager(client, clock);
    const held = await tokens.token();
    client.next.push('failed', 'failed');
    clock.t += 5_000; // inside the refresh-ahead window, token still valid
    (tokens as unknown as { fetchInBackground(): void }).fetchInBackground();
    const generation = () => (tokens as unknown as { current?: { generation: number } }).current?.generation;
    await waitFor('the third refresh attempt to succeed', () => generation() === held.generation + 1);
    assert.equal(tokens.hasValidToken(), true);
    assert.equal((await tokens.token()).generation, held.generation + 1);
    assert.deepEqual(
      client.calls.map((c) => c.grant),
      ['password', 'refresh_token', 'refresh_token', 'refresh_token'],
    );
    tokens.stop();
  });

  it('with no token and logins failing, requests get sidecar.token.unavailable at once and readiness is false', async () => {
    const client = new FakeTokenClient();
    client.next.push('rejected', 'rejected', 'rejected', 'rejected', 'rejected', 'rejected');
    const clock = { t: 0 };
    const { tokens, logs } = manager(client, clock);
    const started = Date.now();
    tokens.start();
    await waitFor(
      'the first refused login',
      () => client.calls.length >= 1 && !(tokens as unknown as { inflight?: unknown }).inflight,
    );
    assert.equal(tokens.hasValidToken(), false);
    await assert.rejects(tokens.token(), { code: 'sidecar.token.unavailable', status: 503, retryable: true });
    // Kept retrying with backoff (not a tight loop, not given up), and logged why.
    await waitFor('three logins', () => client.calls.length >= 3);
    const perSecond = client.calls.length / ((Date.now() - started) / 1000);
    assert.ok(perSecond < 60, `${perSecond.toFixed(0)} logins per second is a tight loop`);
    assert.match(logs.text, /"status":401,"code":"FAILED"/);
    tokens.stop();
  });
});
