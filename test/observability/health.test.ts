import assert from 'node:assert/strict';
import type { AddressInfo } from 'node:net';
import type { Server } from 'node:http';
import { after, before, describe, it } from 'node:test';
import { Registry } from 'prom-client';
import { startSidecar, type RunningSidecar } from '../../src/app.js';
import { loadConfig } from '../../src/config/load.js';
import { createAdminServer, isLoopback, type HealthState, type TokenHealth } from '../../src/observability/health.js';
import { makeKeys } from '../support/keys.js';
import { RecordingGateway } from '../support/recording-gateway.js';
import { CapturedOutput, sidecarEnv } from '../support/sidecar.js';
import { waitFor } from '../support/wait-for.js';

describe('admin listener: who may call /quitquitquit', () => {
  it('accepts IPv4, IPv6 and IPv4-mapped loopback peers', () => {
    for (const address of ['127.0.0.1', '127.0.0.2', '::1', '::ffff:127.0.0.1'])
      assert.equal(isLoopback(address), true, address);
  });
  it('refuses every other peer, including pod and node addresses', () => {
    for (const address of [
      '10.1.2.3',
      '192.168.0.5',
      '::ffff:10.0.0.1',
      'fe80::1',
      '2001:db8::1',
      '0.0.0.0',
      undefined,
    ]) {
      assert.equal(isLoopback(address), false, String(address));
    }
  });
});

interface Answer {
  readonly status: number;
  readonly headers: Headers;
  readonly body: string;
}

async function call(base: string, path: string, method = 'GET'): Promise<Answer> {
  const res = await fetch(`${base}${path}`, { method });
  return { status: res.status, headers: res.headers, body: await res.text() };
}

function json(answer: Answer): Record<string, unknown> {
  assert.equal(answer.headers.get('content-type'), 'application/json');
  return JSON.parse(answer.body) as Record<string, unknown>;
}

/** An admin listener over a hand-set state: the endpoints' answers, independent of the app's wiring. */
async function adminOver(
  state: { started: boolean; ready: boolean; serving: boolean; token: TokenHealth },
  options: { readinessRequiresToken?: boolean; onQuit?: () => void } = {},
): Promise<{ url: string; server: Server }> {
  const health: HealthState = {
    started: () => state.started,
    ready: () => state.ready,
    serving: () => state.serving,
    token: () => state.token,
  };
  const server = createAdminServer({
    registry: new Registry(),
    health,
    readinessRequiresToken: options.readinessRequiresToken ?? false,
    ...(options.onQuit ? { onQuit: options.onQuit } : {}),
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, server };
}

describe('admin listener: endpoints', () => {
  const state = { started: true, ready: true, serving: true, token: { valid: false } as TokenHealth };
  let url = '';
  let server: Server | undefined;
  let quits = 0;
  before(async () => ({ url, server } = await adminOver(state, { onQuit: () => quits++ })));
  after(() => server?.close());

  it('/readyz and /startupz answer what the state says, /livez always 200', async () => {
    assert.equal((await call(url, '/livez')).status, 200);
    assert.equal((await call(url, '/readyz')).status, 200);
    state.ready = false;
    state.started = false;
    assert.equal((await call(url, '/readyz')).status, 503);
    assert.equal((await call(url, '/startupz')).status, 503);
    assert.equal((await call(url, '/livez')).status, 200);
    state.ready = true;
    state.started = true;
    const head = await call(url, '/readyz', 'HEAD');
    assert.equal(head.status, 200);
    assert.equal(head.body, '');
  });

  it('/healthz/token: 503 with JSON while no valid token is held, 200 with the expiry times when one is', async () => {
    state.token = { valid: false };
    const none = await call(url, '/healthz/token');
    assert.equal(none.status, 503);
    assert.deepEqual(json(none), { valid: false, requiredForReadiness: false });
    const accessExpiresAtMs = Date.now() + 600_000;
    const refreshExpiresAtMs = Date.now() + 3_600_000;
    // Whatever else the state object carries (a token, by mistake), only the times are reported.
    const leaky = { valid: true, accessExpiresAtMs, refreshExpiresAtMs, accessToken: 'at-secret-value' };
    state.token = leaky;
    const held = await call(url, '/healthz/token');
    assert.equal(held.status, 200);
    const body = json(held);
    assert.deepEqual(Object.keys(body).sort(), [
      'accessExpiresAt',
      'accessExpiresInSeconds',
      'refreshExpiresAt',
      'requiredForReadiness',
      'valid',
    ]);
    assert.equal(body.accessExpiresAt, new Date(accessExpiresAtMs).toISOString());
    assert.equal(body.refreshExpiresAt, new Date(refreshExpiresAtMs).toISOString());
    assert.ok(Number(body.accessExpiresInSeconds) > 590 && Number(body.accessExpiresInSeconds) <= 600);
    assert.doesNotMatch(held.body, /at-secret-value/);
  });

  it('/readyz?verbose: the /readyz status with each check as JSON', async () => {
    state.token = { valid: false };
    const ready = await call(url, '/readyz?verbose');
    assert.equal(ready.status, 200);
    assert.deepEqual(json(ready), {
      status: 'ready',
      checks: { serving: true, token: { valid: false, requiredForReadiness: false } },
    });
    state.ready = false;
    state.serving = false;
    const draining = await call(url, '/readyz?verbose=1');
    assert.equal(draining.status, 503);
    assert.equal(json(draining).status, 'not ready');
    state.ready = true;
    state.serving = true;
  });

  it('405 names the allowed methods in Allow; unknown paths are 404 whatever the method', async () => {
    for (const path of ['/livez', '/readyz', '/startupz', '/healthz/token', '/metrics']) {
      for (const method of ['POST', 'PUT', 'DELETE']) {
        const answer = await call(url, path, method);
        assert.equal(answer.status, 405, `${method} ${path}`);
        assert.equal(answer.headers.get('allow'), 'GET, HEAD', `${method} ${path}`);
      }
    }
    const getQuit = await call(url, '/quitquitquit');
    assert.equal(getQuit.status, 405);
    assert.equal(getQuit.headers.get('allow'), 'POST');
    assert.equal(quits, 0);
    assert.equal((await call(url, '/nope', 'POST')).status, 404);
    assert.equal((await call(url, '/nope')).status, 404);
  });

  it('without the quit endpoint, /quitquitquit does not exist', async () => {
    const { url: plain, server: other } = await adminOver(state);
    try {
      assert.equal((await call(plain, '/quitquitquit', 'POST')).status, 404);
    } finally {
      other.close();
    }
  });
});

/**
 * The app's wiring: startSidecar against a gateway that refuses the password, then accepts it. A token outage
 * must not make the pod unready (nor restart it) unless readiness was explicitly tied to the token.
 */
describe('readiness and the access token, as startSidecar wires them', () => {
  let gateway: RecordingGateway;
  let env: NodeJS.ProcessEnv;
  before(async () => {
    gateway = await new RecordingGateway().start();
    env = await sidecarEnv(await makeKeys(), gateway.url, {
      SIDECAR_TOKEN_LOGIN_BACKOFF_MAX_MS: '100',
      SIDECAR_SHUTDOWN_DRAIN_DELAY_MS: '600',
      SIDECAR_LOG_LEVEL: 'warn',
    });
  });
  after(() => gateway.stop());

  async function start(extra: NodeJS.ProcessEnv = {}): Promise<RunningSidecar> {
    return startSidecar(loadConfig({ ...env, ...extra }), { logDestination: new CapturedOutput() });
  }

  it('by default: started and ready while serving, though no token can be had; the token is reported apart', async () => {
    gateway.refusePasswordLogins = true;
    const sidecar = await start();
    try {
      await waitFor('a refused login', () => Promise.resolve(gateway.grants.length > 0));
      assert.equal((await call(sidecar.adminUrl, '/startupz')).status, 200);
      assert.equal((await call(sidecar.adminUrl, '/readyz')).status, 200);
      assert.equal(sidecar.isReady(), true);
      const token = await call(sidecar.adminUrl, '/healthz/token');
      assert.equal(token.status, 503);
      assert.deepEqual(json(token), { valid: false, requiredForReadiness: false });
      assert.deepEqual(json(await call(sidecar.adminUrl, '/readyz?verbose')), {
        status: 'ready',
        checks: { serving: true, token: { valid: false, requiredForReadiness: false } },
      });
      const metrics = (await call(sidecar.adminUrl, '/metrics')).body;
      assert.match(metrics, /^signing_sidecar_ready 1$/m);
      assert.match(metrics, /^signing_sidecar_access_token_expiry_timestamp_seconds 0$/m, 'the token alert sees it');

      gateway.refusePasswordLogins = false;
      await waitFor('a token', async () => (await call(sidecar.adminUrl, '/healthz/token')).status === 200);
      const held = json(await call(sidecar.adminUrl, '/healthz/token'));
      assert.equal(held.valid, true);
      assert.ok(Date.parse(String(held.accessExpiresAt)) > Date.now());
      for (const secret of [...gateway.issuedAccessTokens, ...gateway.issuedRefreshTokens])
        assert.doesNotMatch(JSON.stringify(held), new RegExp(secret));

      // Shutdown: unready at once while still serving for the drain delay; startup stays passed.
      const stopping = sidecar.shutdown('test');
      assert.equal((await call(sidecar.adminUrl, '/readyz')).status, 503);
      assert.equal(json(await call(sidecar.adminUrl, '/readyz?verbose')).status, 'not ready');
      assert.equal((await call(sidecar.adminUrl, '/startupz')).status, 200);
      assert.equal((await call(sidecar.adminUrl, '/livez')).status, 200);
      await stopping;
    } finally {
      await sidecar.shutdown('test');
    }
  });

  it('SIDECAR_READINESS_REQUIRES_TOKEN=true: started while serving, ready only with a valid token', async () => {
    gateway.refusePasswordLogins = true;
    const grantsBefore = gateway.grants.length;
    const sidecar = await start({ SIDECAR_READINESS_REQUIRES_TOKEN: 'true' });
    try {
      await waitFor('a refused login', () => Promise.resolve(gateway.grants.length > grantsBefore));
      assert.equal((await call(sidecar.adminUrl, '/startupz')).status, 200, 'startup never waits for the token');
      assert.equal((await call(sidecar.adminUrl, '/readyz')).status, 503);
      assert.deepEqual(json(await call(sidecar.adminUrl, '/readyz?verbose')), {
        status: 'not ready',
        checks: { serving: true, token: { valid: false, requiredForReadiness: true } },
      });
      assert.match((await call(sidecar.adminUrl, '/metrics')).body, /^signing_sidecar_ready 0$/m);
      gateway.refusePasswordLogins = false;
      await waitFor('ready', async () => (await call(sidecar.adminUrl, '/readyz')).status === 200);
      assert.equal(json(await call(sidecar.adminUrl, '/healthz/token')).requiredForReadiness, true);
    } finally {
      await sidecar.shutdown('test');
    }
  });
});
