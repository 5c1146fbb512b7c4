// The /_sim/ control API over HTTP, and faults injected through it: what a test or a vendor drives by hand.
import assert from 'node:assert/strict';
import type { IncomingMessage } from 'node:http';
import { after, before, describe, it } from 'node:test';
import { PASSWORD, USERNAME, codeOf, login, makeKeys, send, signedPost, startWithAccount } from './support.js';
import type { RawResponse, TestKeys } from './support.js';
import type { RunningSimulator } from '@signing-sidecar/simulator';
import { handleControl } from '../../packages/simulator/src/control-api.js';
import type { SimContext } from '../../packages/simulator/src/context.js';

function control(sim: RunningSimulator, method: string, path: string, body?: unknown): Promise<RawResponse> {
  return send(sim.listenUrl, {
    method,
    path,
    headers: { 'content-type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
}

describe('control API', () => {
  let keys: TestKeys;
  let sim: RunningSimulator;
  let token: string;
  before(async () => {
    keys = await makeKeys();
    sim = await startWithAccount(keys);
    token = (await login(sim)).access_token ?? '';
  });
  after(() => sim.close());

  it('lists and completes transactions; a second completion is a 409', async () => {
    const init = await signedPost(sim, { key: keys.privateKey, token });
    const id = String(init.json().transaction_id);
    const list = await control(sim, 'GET', '/_sim/transactions');
    const found = (list.json().transactions as Record<string, string>[]).find((t) => t.transaction_id === id);
    assert.equal(found?.status, 'PENDING');
    const done = await control(sim, 'POST', `/_sim/transactions/${id}/complete`, { status: 'FAILED' });
    assert.equal(done.status, 200);
    assert.equal(done.json().status, 'FAILED');
    assert.match(String(done.json().completed_at), /Z$/);
    const again = await control(sim, 'POST', `/_sim/transactions/${id}/complete`, { status: 'SUCCESS' });
    assert.equal(again.status, 409);
    assert.equal(codeOf(again), 'sim.transaction.already_final');
    const missing = await control(sim, 'POST', '/_sim/transactions/txn_ffff/complete', { status: 'SUCCESS' });
    assert.equal(missing.status, 404);
  });

  it('shifts the clock, which provokes expired and future timestamps for a correct client', async () => {
    const behind = await control(sim, 'POST', '/_sim/clock', { offset_seconds: 120 });
    assert.equal(behind.json().offset_seconds, 120);
    const expired = await signedPost(sim, {
      key: keys.privateKey,
      token,
      timestamp: String(Math.floor(Date.now() / 1000)),
    });
    assert.equal(codeOf(expired), 'signature.timestamp.expired');
    await control(sim, 'POST', '/_sim/clock', { offset_seconds: -30 });
    const future = await signedPost(sim, {
      key: keys.privateKey,
      token,
      timestamp: String(Math.floor(Date.now() / 1000)),
    });
    assert.equal(codeOf(future), 'signature.timestamp.future');
    const shifted = await control(sim, 'POST', '/_sim/clock', { shift_seconds: 30 });
    assert.equal(shifted.json().offset_seconds, 0);
    const bad = await control(sim, 'POST', '/_sim/clock', { offset_seconds: '10' });
    assert.equal(codeOf(bad), 'sim.clock.invalid');
  });

  it('sends a Date header from the simulator clock', async () => {
    await control(sim, 'POST', '/_sim/clock', { offset_seconds: 3600 });
    const res = await control(sim, 'GET', '/_sim/health');
    await control(sim, 'POST', '/_sim/clock', { offset_seconds: 0 });
    const skew = Date.parse(String(res.headers.date)) - Date.now();
    assert.ok(Math.abs(skew - 3_600_000) < 5000, `skew ${skew}`);
  });

  it('injects faults for the next N signed requests: 5xx, 401 FAILED, reset, delay', async () => {
    const arm = await control(sim, 'POST', '/_sim/faults', { kind: '5xx', count: 2, status: 502 });
    assert.equal(arm.status, 201);
    const before = sim.transactions().length;
    for (let i = 0; i < 2; i++) {
      const res = await signedPost(sim, { key: keys.privateKey, token });
      assert.equal(res.status, 502);
      assert.equal(codeOf(res), 'sim.fault.injected');
    }
    assert.equal(sim.transactions().length, before, 'a faulted request creates nothing');
    assert.equal((await signedPost(sim, { key: keys.privateKey, token })).status, 200);

    await control(sim, 'POST', '/_sim/faults', { kind: '401' });
    const rejected = await signedPost(sim, { key: keys.privateKey, token });
    assert.equal(rejected.status, 401);
    assert.equal(codeOf(rejected), 'FAILED');

    await control(sim, 'POST', '/_sim/faults', { kind: 'reset' });
    await assert.rejects(signedPost(sim, { key: keys.privateKey, token }), /ECONNRESET|socket hang up/);

    await control(sim, 'POST', '/_sim/faults', { kind: 'delay', delay_ms: 300 });
    const started = Date.now();
    const slow = await signedPost(sim, { key: keys.privateKey, token });
    assert.equal(slow.status, 200);
    assert.ok(Date.now() - started >= 280);
    assert.deepEqual((await control(sim, 'GET', '/_sim/faults')).json().faults, []);
  });

  it('commit-reset records the transaction, then cuts the connection with no answer', async () => {
    await control(sim, 'POST', '/_sim/faults', { kind: 'commit-reset' });
    const before = sim.transactions().length;
    await assert.rejects(signedPost(sim, { key: keys.privateKey, token }), /ECONNRESET|socket hang up/);
    assert.equal(sim.transactions().length, before + 1, 'the payment was made although no answer came');
    assert.equal((await signedPost(sim, { key: keys.privateKey, token })).status, 200, 'the fault was used up');
  });

  it('commit-slow records the transaction at once and answers only after delay_ms', async () => {
    await control(sim, 'POST', '/_sim/faults', { kind: 'commit-slow', delay_ms: 1_500 });
    const before = sim.transactions().length;
    const started = Date.now();
    const answer = signedPost(sim, { key: keys.privateKey, token });
    await new Promise((resolve) => setTimeout(resolve, 700));
    assert.equal(sim.transactions().length, before + 1, 'recorded before the answer left');
    const slow = await answer;
    assert.equal(slow.status, 200);
    assert.ok(Date.now() - started >= 1_400, 'answered after the delay');
    const ids = sim.transactions().map((t) => t.transaction_id);
    assert.ok(ids.includes(String(slow.json().transaction_id)), 'the late answer names the recorded transaction');
  });

  it('rotates an account password: the new one logs in, the old one is refused, tokens stay valid', async () => {
    const rotated = await control(sim, 'PUT', `/_sim/accounts/${encodeURIComponent(USERNAME)}/password`, {
      password: 'rotated password',
    });
    assert.equal(rotated.status, 200);
    assert.doesNotMatch(rotated.text, /rotated password/);
    assert.equal((await signedPost(sim, { key: keys.privateKey, token })).status, 200, 'issued tokens still work');
    await assert.rejects(login(sim), /401/);
    assert.ok((await login(sim, 'rotated password')).access_token);
    const bad = await control(sim, 'PUT', `/_sim/accounts/${encodeURIComponent(USERNAME)}/password`, { password: 3 });
    assert.equal(codeOf(bad), 'sim.password.invalid');
    const unknown = await control(sim, 'PUT', '/_sim/accounts/nobody%40example.com/password', { password: 'x' });
    assert.equal(unknown.status, 404);
    await control(sim, 'PUT', `/_sim/accounts/${encodeURIComponent(USERNAME)}/password`, { password: PASSWORD });
    token = (await login(sim)).access_token ?? '';
  });

  it('applies token-targeted faults to the token endpoint only, and validates fault specs', async () => {
    await control(sim, 'POST', '/_sim/faults', { kind: '5xx', target: 'token' });
    assert.equal((await signedPost(sim, { key: keys.privateKey, token })).status, 200);
    await assert.rejects(login(sim), /503/);
    const bad = await control(sim, 'POST', '/_sim/faults', { kind: 'explode' });
    assert.equal(bad.status, 400);
    assert.equal(codeOf(bad), 'sim.fault.invalid');
    const badCount = await control(sim, 'POST', '/_sim/faults', { kind: '5xx', count: '3' });
    assert.equal(codeOf(badCount), 'sim.fault.invalid');
    token = (await login(sim)).access_token ?? '';
  });

  it('answers loopback clients only', async () => {
    // Tests send traffic to loopback addresses only, so a remote client is represented by its socket address:
    // handleControl is the same guard the server runs for every /_sim/ request.
    const remote = { socket: { remoteAddress: '203.0.113.9' }, method: 'GET' } as unknown as IncomingMessage;
    await assert.rejects(
      handleControl(undefined as unknown as SimContext, remote, '/_sim/transactions'),
      (err: unknown) => {
        assert.equal((err as { code?: string }).code, 'sim.control.forbidden');
        assert.equal((err as { status?: number }).status, 403);
        return true;
      },
    );
    const local = await send(sim.listenUrl, { method: 'GET', path: '/_sim/transactions' });
    assert.equal(local.status, 200);
  });

  it('refuses a loopback request addressed to another name (DNS rebinding), reads and writes alike', async () => {
    // A page on a name its owner points at 127.0.0.1 calls the simulator same-origin, its own name in Host.
    const fault = JSON.stringify({ kind: '5xx' });
    const json = { 'content-type': 'application/json' };
    for (const host of ['attacker.example', `attacker.example:${sim.port}`, `127.0.0.1.attacker.example:${sim.port}`]) {
      const read = await send(sim.listenUrl, { method: 'GET', path: '/_sim/transactions', headers: { host } });
      assert.equal(read.status, 403, host);
      assert.equal(codeOf(read), 'sim.control.forbidden');
      const dashboard = await send(sim.listenUrl, { method: 'GET', path: '/_sim/', headers: { host } });
      assert.equal(dashboard.status, 403, `dashboard for ${host}`);
      const write = await send(sim.listenUrl, { path: '/_sim/faults', headers: { ...json, host }, body: fault });
      assert.equal(write.status, 403, `fault for ${host}`);
    }
    assert.deepEqual((await send(sim.listenUrl, { method: 'GET', path: '/_sim/faults' })).json().faults, []);
    for (const host of [`localhost:${sim.port}`, 'localhost', `app.localhost:${sim.port}`, `127.0.0.1:${sim.port}`]) {
      const read = await send(sim.listenUrl, { method: 'GET', path: '/_sim/transactions', headers: { host } });
      assert.equal(read.status, 200, host);
    }
    const ipv6 = await send(sim.listenUrl, {
      method: 'GET',
      path: '/_sim/health',
      headers: { host: `[::1]:${sim.port}` },
    });
    assert.equal(ipv6.status, 200);
  });

  it("answers the base URL's host, which a simulator behind a name is called by", async () => {
    const named = await startWithAccount(keys, { publicBaseUrl: 'https://sandbox.gateway.example/gw' });
    try {
      const headers = { host: 'sandbox.gateway.example' };
      assert.equal((await send(named.listenUrl, { method: 'GET', path: '/_sim/health', headers })).status, 200);
      const other = { host: 'attacker.example' };
      assert.equal((await send(named.listenUrl, { method: 'GET', path: '/_sim/health', headers: other })).status, 403);
    } finally {
      await named.close();
    }
  });
});
