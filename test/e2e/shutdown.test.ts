// Lifecycle of the real process: health probes, SIGTERM drain (readiness off at once, new requests served for
// the drain delay, then new connections refused, in-flight requests finished, exit 0), and /quitquitquit.
import assert from 'node:assert/strict';
import { Agent, request, type IncomingHttpHeaders } from 'node:http';
import { connect } from 'node:net';
import { describe, it } from 'node:test';
import { makeKeys, type TestKeys } from '../support/keys.js';
import { RecordingGateway, TEST_PASSWORD } from '../support/recording-gateway.js';
import { sidecarEnv } from '../support/sidecar.js';
import { spawnSidecar, type SpawnedSidecar } from '../support/spawned-sidecar.js';
import { depositJson } from '../support/payloads.js';

const DEPOSIT = depositJson({ amount: '7.00', invoice_no: 'inv-shutdown' });

interface Reply {
  readonly status: number;
  readonly headers: IncomingHttpHeaders;
  readonly body: string;
}

/** One request on its own fresh connection (agent: false), so "new connection" means exactly that. */
function call(method: string, url: string, body?: string, agent: Agent | false = false): Promise<Reply> {
  return new Promise((resolve, reject) => {
    const req = request(
      url,
      { method, agent, headers: body === undefined ? {} : { 'content-type': 'application/json' } },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () =>
          resolve({ status: res.statusCode ?? 0, headers: res.headers, body: Buffer.concat(chunks).toString('utf8') }),
        );
      },
    );
    req.on('error', reject);
    req.end(body);
  });
}

const probe = async (s: SpawnedSidecar, path: string): Promise<number> =>
  (await call('GET', `${s.adminUrl}${path}`)).status;

/** "connected" or the connect error code (ECONNREFUSED once the listener is closed). */
function tryConnect(url: string): Promise<string> {
  const { hostname, port } = new URL(url);
  return new Promise((resolve) => {
    const socket = connect(Number(port), hostname);
    socket.once('connect', () => {
      socket.destroy();
      resolve('connected');
    });
    socket.once('error', (err: NodeJS.ErrnoException) => resolve(err.code ?? err.message));
  });
}

async function until<T>(what: string, ms: number, step: () => Promise<T>, done: (value: T) => boolean): Promise<T> {
  const deadline = Date.now() + ms;
  for (;;) {
    const value = await step();
    if (done(value)) return value;
    if (Date.now() > deadline) assert.fail(`${what} within ${ms} ms (last: ${String(value)})`);
    await new Promise((resolve) => setTimeout(resolve, 25));
  }
}

function assertNoSecrets(text: string, keys: TestKeys, gateway: RecordingGateway): void {
  assert.equal(text.includes(TEST_PASSWORD), false, 'password in the output');
  for (const token of [...gateway.issuedAccessTokens, ...gateway.issuedRefreshTokens])
    assert.equal(text.includes(token), false, 'token in the output');
  for (const r of gateway.requests) {
    assert.equal(text.includes(String(r.headers['x-signature'])), false, 'signature in the output');
    assert.equal(text.includes((JSON.parse(r.body) as { data: string }).data), false, 'data in the output');
  }
  for (const line of keys.privateKeyPem.split('\n').filter((l) => l !== '' && !l.startsWith('-----'))) {
    assert.equal(text.includes(line), false, 'private key line in the output');
  }
}

describe('process lifecycle', () => {
  it('probes, then SIGTERM: unready at once, serves during the drain delay, refuses after, finishes in-flight, exits 0', async () => {
    const keys = await makeKeys();
    const gateway = await new RecordingGateway().start();
    gateway.refusePasswordLogins = true;
    const env = await sidecarEnv(keys, gateway.url, {
      // 3 s: each step below has room for a loaded machine, and still happens inside the drain delay.
      SIDECAR_SHUTDOWN_DRAIN_DELAY_MS: '3000',
      SIDECAR_SHUTDOWN_MAX_DELAY_MS: '10000',
      SIDECAR_TOKEN_LOGIN_BACKOFF_MAX_MS: '200',
      SIDECAR_LOG_LEVEL: 'info',
    });
    const sidecar = await spawnSidecar(env);
    try {
      // Before the first token: alive, started and ready (it serves); the token is reported on its own.
      assert.equal(await probe(sidecar, '/livez'), 200);
      assert.equal(await probe(sidecar, '/startupz'), 200);
      assert.equal(await probe(sidecar, '/readyz'), 200);
      assert.equal(await probe(sidecar, '/healthz/token'), 503);
      gateway.refusePasswordLogins = false;
      await until(
        'a token after the login succeeds',
        5_000,
        () => probe(sidecar, '/healthz/token'),
        (s) => s === 200,
      );
      assert.equal(await probe(sidecar, '/startupz'), 200);
      assert.equal(await probe(sidecar, '/livez'), 200);
      // The quit endpoint is off unless enabled.
      assert.notEqual((await call('POST', `${sidecar.adminUrl}/quitquitquit`)).status, 202);

      gateway.holdUntil = Number.MAX_SAFE_INTEGER; // the gateway holds every answer until release()
      // Keep-alive clients: each answer must tell its client to close, which agent: false would do on its own.
      const keepAlive = new Agent({ keepAlive: true });
      const inFlight = call('POST', `${sidecar.proxyUrl}/api/v2/transaction/init`, DEPOSIT, keepAlive);
      await until(
        'the first request reaches the gateway',
        3_000,
        () => Promise.resolve(gateway.requests.length),
        (n) => n === 1,
      );
      const sigterm = Date.now();
      sidecar.child.kill('SIGTERM');
      await until(
        'readiness off',
        1_500,
        () => probe(sidecar, '/readyz'),
        (s) => s === 503,
      );
      assert.equal(await probe(sidecar, '/livez'), 200, 'still alive while draining');
      // A new connection during the drain delay is still served (endpoints take a while to drop the pod).
      const duringDrain = call('POST', `${sidecar.proxyUrl}/api/v2/transaction/init`, DEPOSIT, keepAlive);
      await until(
        'the drain-time request reaches the gateway',
        2_000,
        () => Promise.resolve(gateway.requests.length),
        (n) => n === 2,
      );
      assert.ok(Date.now() - sigterm < 3_000, 'sent within the drain delay');
      await until(
        'new connections refused after the drain delay',
        5_000,
        () => tryConnect(sidecar.proxyUrl),
        (r) => r === 'ECONNREFUSED',
      );
      assert.ok(
        Date.now() - sigterm >= 2_900,
        `listener closed only after the drain delay (${Date.now() - sigterm} ms)`,
      );
      assert.equal(sidecar.child.exitCode, null, 'still waiting for the in-flight requests');

      gateway.release();
      const [first, second] = await Promise.all([inFlight, duringDrain]);
      assert.equal(first.status, 201, 'the in-flight request completed');
      assert.equal(second.status, 201, 'the drain-time request completed');
      assert.equal(second.headers.connection, 'close', 'drain-time answers ask clients to reconnect elsewhere');
      assert.equal(first.headers.connection, 'close', 'so do answers after SIGTERM to requests from before it');
      keepAlive.destroy();
      const exit = await Promise.race([
        sidecar.exited,
        new Promise<'timeout'>((r) => setTimeout(() => r('timeout'), 5_000)),
      ]);
      assert.deepEqual(exit, { code: 0, signal: null });
      const { stdout, stderr } = sidecar.output();
      assert.match(stdout, /"event":"shutdown.begin"/);
      assert.match(stdout, /"event":"shutdown.done","drained":true/);
      assertNoSecrets(stdout + stderr, keys, gateway);
    } finally {
      await sidecar.kill();
      await gateway.stop();
    }
  });

  // The refusal of non-loopback callers is unit-tested (test/observability/health.test.ts): tests send traffic to
  // loopback addresses only.
  it('POST /quitquitquit: accepted from loopback with 202, exit 0', async () => {
    const keys = await makeKeys();
    const gateway = await new RecordingGateway().start();
    const env = await sidecarEnv(keys, gateway.url, { SIDECAR_QUIT_ENDPOINT: 'true', SIDECAR_LOG_LEVEL: 'info' });
    const sidecar = await spawnSidecar(env);
    try {
      await until(
        'ready',
        5_000,
        () => probe(sidecar, '/readyz'),
        (s) => s === 200,
      );
      const port = new URL(sidecar.adminUrl).port;
      const quit = await call('POST', `http://127.0.0.1:${port}/quitquitquit`);
      assert.equal(quit.status, 202);
      const exit = await Promise.race([
        sidecar.exited,
        new Promise<'timeout'>((r) => setTimeout(() => r('timeout'), 5_000)),
      ]);
      assert.deepEqual(exit, { code: 0, signal: null });
      assert.match(sidecar.output().stdout, /"reason":"quitquitquit"/);
    } finally {
      await sidecar.kill();
      await gateway.stop();
    }
  });
});
