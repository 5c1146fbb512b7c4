import assert from 'node:assert/strict';
import { writeFile } from 'node:fs/promises';
import { request } from 'node:https';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { startSimulator, type RunningSimulator, type SimulatorOptions } from '@signing-sidecar/simulator';
import { GatewayRelay, sendCaptured } from '../support/gateway-relay.js';
import { makeKeys, type TestKeys } from '../support/keys.js';
import { TEST_PASSWORD, TEST_USERNAME } from '../support/recording-gateway.js';
import { DEPOSIT_PATH, startSimWorld } from '../support/sim-world.js';
import { sidecarEnv, startTestSidecar, waitUntilReady, type TestSidecar } from '../support/sidecar.js';
import { depositJson } from '../support/payloads.js';

// Sidecar and simulator over real sockets, HTTPS unless a relay must read the bytes: every error row of spec
// section 7 that a vendor can run into, provoked the way it happens in production.

async function deposit(proxyUrl: string): Promise<{ status: number; body: Record<string, unknown> }> {
  const response = await fetch(`${proxyUrl}/api/v2/transaction/init`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: depositJson({ invoice_no: `inv-${Math.random()}` }),
  });
  return { status: response.status, body: (await response.json()) as Record<string, unknown> };
}

interface Pair {
  sim: RunningSimulator;
  sidecar: TestSidecar;
  stop: () => Promise<void>;
}

/** A simulator with one account for `accountKeys`, and a sidecar signing with `sidecarKeys`, trusting its CA. */
async function pair(
  accountKeys: TestKeys,
  sidecarKeys = accountKeys,
  simOptions: Partial<SimulatorOptions> = {},
  allowIps?: string[],
  extraEnv: NodeJS.ProcessEnv = {},
): Promise<Pair> {
  const sim = await startSimulator({
    tls: true,
    accounts: [
      {
        username: TEST_USERNAME,
        password: TEST_PASSWORD,
        publicKeyPem: accountKeys.publicKeyPem,
        ...(allowIps ? { allowIps } : {}),
      },
    ],
    ...simOptions,
  });
  const caFile = join(sidecarKeys.dir, `ca-${sim.port}.pem`);
  await writeFile(caFile, sim.caPem ?? '');
  const sidecar = await startTestSidecar(
    await sidecarEnv(sidecarKeys, sim.baseUrl, { SIDECAR_UPSTREAM_CA_FILE: caFile, ...extraEnv }),
  );
  return {
    sim,
    sidecar,
    stop: async () => {
      await sidecar.stop();
      await sim.close();
    },
  };
}

async function metric(sidecar: TestSidecar, series: string): Promise<number> {
  const text = await (await fetch(`${sidecar.sidecar.adminUrl}/metrics`)).text();
  const line = text.split('\n').find((l) => l.startsWith(`${series} `));
  return line === undefined ? Number.NaN : Number(line.split(' ')[1]);
}

describe('sidecar + simulator, end to end', () => {
  it('over HTTPS with the simulator CA: a deposit returns a transaction_link, PENDING', async () => {
    const keys = await makeKeys();
    const { sim, sidecar, stop } = await pair(keys, keys);
    try {
      await waitUntilReady(sidecar.sidecar);
      const answer = await deposit(sidecar.sidecar.egressUrl);
      assert.equal(answer.status, 200);
      assert.match(String(answer.body.transaction_link), /^https:\/\/127\.0\.0\.1:\d+\//);
      assert.equal(answer.body.status, 'PENDING');
      assert.equal(sim.transactions().length, 1);
    } finally {
      await stop();
    }
  });

  // The gateway compares whole seconds: a request signed late in one second and checked in the next looks a second
  // less ahead, so the future case is two seconds past its 5 s limit, not one (it looks further behind, never less).
  for (const [name, shift, code] of [
    ['expired: gateway clock 61 s ahead of the sidecar', 61, 'signature.timestamp.expired'],
    ['future: gateway clock 7 s behind the sidecar', -7, 'signature.timestamp.future'],
  ] as const) {
    it(`timestamp ${name} -> ${code}, passed through, not retried`, async () => {
      const keys = await makeKeys();
      const { sim, sidecar, stop } = await pair(keys);
      try {
        await waitUntilReady(sidecar.sidecar);
        sim.clock.shift(shift);
        const answer = await deposit(sidecar.sidecar.egressUrl);
        assert.equal(answer.status, 401);
        assert.equal(answer.body.code, code);
        assert.equal(sim.transactions().length, 0);
        assert.equal(await metric(sidecar, `signing_sidecar_gateway_errors_total{code="${code}"}`), 1);
        assert.ok(Math.abs((await metric(sidecar, 'signing_sidecar_gateway_clock_skew_seconds')) - shift) <= 2);
      } finally {
        await stop();
      }
    });
  }

  it('a captured request resent within 95 s -> signature.nonce.replayed (401), and the payment exists once', async () => {
    // The simulator's public address is the relay's, so the signature made for the relay URL verifies there.
    const world = await startSimWorld();
    try {
      const first = await deposit(world.running.sidecar.egressUrl);
      assert.equal(first.status, 200);
      const captured = world.relay.captured.find((c) => c.url === DEPOSIT_PATH)!;
      const replay = await sendCaptured(world.simulator.listenUrl, captured);
      assert.equal(replay.status, 401);
      assert.equal((JSON.parse(replay.body.toString()) as { code: string }).code, 'signature.nonce.replayed');
      assert.equal(world.simulator.transactions().length, 1);
    } finally {
      await world.stop();
    }
  });

  it('the sidecar signing with a key the gateway does not hold -> signature.verify.failed, with the diagnostic log line', async () => {
    const [uploaded, other] = await Promise.all([makeKeys(), makeKeys()]);
    const { sim, sidecar, stop } = await pair(uploaded, other);
    try {
      await waitUntilReady(sidecar.sidecar);
      const answer = await deposit(sidecar.sidecar.egressUrl);
      assert.equal(answer.status, 401);
      assert.equal(answer.body.code, 'signature.verify.failed');
      assert.equal(sim.transactions().length, 0);
      const line = sidecar.logs.lines().find((l) => l.event === 'signature.verify.failed');
      assert.ok(line, 'the sidecar logs the signing string for diffing');
      assert.match(
        String(line.signingString),
        new RegExp(
          `^POST\\.${sim.baseUrl.replace(/\./g, '\\.')}/api/v2/transaction/init\\.\\d+\\.[A-Za-z0-9_-]{22}\\.sha256:[0-9a-f]{64}$`,
        ),
      );
    } finally {
      await stop();
    }
  });

  it('environment mismatch: a request signed for staging and posted to production -> signature.verify.failed', async () => {
    const keys = await makeKeys();
    const account = { username: TEST_USERNAME, password: TEST_PASSWORD, publicKeyPem: keys.publicKeyPem };
    const production = await startSimulator({ accounts: [account] });
    const stagingRelay = await new GatewayRelay().start();
    const staging = await startSimulator({ accounts: [account], publicBaseUrl: stagingRelay.url });
    stagingRelay.pointAt(staging.listenUrl);
    const sidecar = await startTestSidecar(await sidecarEnv(keys, stagingRelay.url));
    try {
      await waitUntilReady(sidecar.sidecar);
      assert.equal((await deposit(sidecar.sidecar.egressUrl)).status, 200);
      const captured = stagingRelay.captured.find((c) => c.url === '/api/v2/transaction/init')!;
      // Same account, same key, a valid production token: only the signed base address differs.
      const login = await fetch(`${production.baseUrl}/api/v2/auth/token`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ grant_type: 'password', username: TEST_USERNAME, password: TEST_PASSWORD }),
      });
      const token = ((await login.json()) as { access_token: string }).access_token;
      const answer = await sendCaptured(production.listenUrl, {
        ...captured,
        headers: { ...captured.headers, authorization: `Bearer ${token}` },
      });
      assert.equal(answer.status, 401);
      assert.equal((JSON.parse(answer.body.toString()) as { code: string }).code, 'signature.verify.failed');
      assert.equal(production.transactions().length, 0);
    } finally {
      await sidecar.stop();
      await stagingRelay.stop();
      await staging.close();
      await production.close();
    }
  });

  it('egress IP not allowlisted: the login is refused with 403, the sidecar holds no token and answers 503 token.unavailable', async () => {
    const keys = await makeKeys();
    const { sim, sidecar, stop } = await pair(keys, keys, {}, ['203.0.113.0/24']);
    try {
      await new Promise((r) => setTimeout(r, 300));
      assert.equal(sidecar.sidecar.tokens.hasValidToken(), false);
      const answer = await deposit(sidecar.sidecar.egressUrl);
      assert.equal(answer.status, 503);
      assert.equal(answer.body.code, 'sidecar.token.unavailable');
      assert.equal(answer.body.retryable, true);
      assert.equal(sim.transactions().length, 0);
      assert.ok(sidecar.logs.lines().some((l) => l.event === 'token.rejected_grant' && l.status === 403));
      assert.ok(
        (await metric(sidecar, 'signing_sidecar_token_requests_total{grant="password",outcome="rejected"}')) >= 1,
      );
    } finally {
      await stop();
    }
  });

  it('token superseded by a newer password login elsewhere: 401 FAILED, one refresh, one resend, the client sees success', async () => {
    const keys = await makeKeys();
    const { sim, sidecar, stop } = await pair(keys);
    try {
      await waitUntilReady(sidecar.sidecar);
      await sideLogin(sim);
      const answer = await deposit(sidecar.sidecar.egressUrl);
      assert.equal(answer.status, 200);
      assert.equal(sim.transactions().length, 1, 'exactly one payment');
      assert.equal(await metric(sidecar, 'signing_sidecar_retries_total{reason="token_rejected"}'), 1);
      assert.equal(await metric(sidecar, 'signing_sidecar_gateway_errors_total{code="FAILED"}'), 1);
    } finally {
      await stop();
    }
  });
});

/** A password login to an HTTPS simulator, trusting its CA (what another replica or a script would do). */
async function sideLogin(sim: RunningSimulator): Promise<void> {
  await new Promise<void>((resolve, reject) => {
    const req = request(
      `${sim.baseUrl}/api/v2/auth/token`,
      { method: 'POST', ca: sim.caPem, headers: { 'content-type': 'application/json' } },
      (res) => {
        res.resume();
        res.on('end', () => (res.statusCode === 200 ? resolve() : reject(new Error(`login ${res.statusCode}`))));
      },
    );
    req.on('error', reject);
    req.end(JSON.stringify({ grant_type: 'password', username: TEST_USERNAME, password: TEST_PASSWORD }));
  });
}
