// Captures every log byte of a run that goes through every path of the sidecar (success, each sidecar.* error,
// each gateway error, token refresh, login and fallback, upstream failures) and checks that no secret and no
// payload reached it, while the diagnostics an operator needs are there. Then a real `serve` process against a
// gateway that echoes the request into its refusals: its stdout and stderr hold neither the password nor a token.
import assert from 'node:assert/strict';
import { GATEWAY_ERROR_CODES } from '../../src/observability/metric-names.js';
import { createHash } from 'node:crypto';
import { writeFile } from 'node:fs/promises';
import { connect } from 'node:net';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { ECHOED_PASSWORD, EchoingGateway } from '../support/echoing-gateway.js';
import { makeKeys } from '../support/keys.js';
import { TEST_PASSWORD } from '../support/recording-gateway.js';
import { sidecarEnv, waitUntilReady } from '../support/sidecar.js';
import { spawnSidecar } from '../support/spawned-sidecar.js';
import {
  deposit,
  postJson,
  provokeGatewayErrors,
  sentPayloads,
  startSimWorld,
  type SimWorld,
} from '../support/sim-world.js';

const SIDECAR_CODES = [
  'sidecar.route.not_found',
  'sidecar.method.not_allowed',
  'sidecar.body.invalid_json',
  'sidecar.body.not_object',
  'sidecar.body.too_large',
  'sidecar.body.unsupported_media_type',
  'sidecar.body.incomplete',
  'sidecar.token.unavailable',
  'sidecar.upstream.outcome_unknown',
  'sidecar.upstream.unreachable',
];

type Line = Record<string, unknown>;

async function until(what: string, ms: number, done: () => boolean): Promise<void> {
  const deadline = Date.now() + ms;
  while (!done()) {
    if (Date.now() > deadline) assert.fail(`${what} within ${ms} ms`);
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

/** Declares 100 bytes, sends 10, hangs up: the body never completes. */
async function abandonBody(egressUrl: string): Promise<void> {
  const { hostname, port } = new URL(egressUrl);
  const socket = connect(Number(port), hostname);
  await new Promise<void>((resolve, reject) => socket.once('connect', resolve).once('error', reject));
  socket.write(
    'POST /api/v2/transaction/init HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{"amount":',
  );
  await new Promise((resolve) => setTimeout(resolve, 50));
  socket.destroy();
}

describe('logs of a run through every path', () => {
  let world: SimWorld;
  let lines: Line[] = [];
  let text = '';

  before(async () => {
    world = await startSimWorld({
      SIDECAR_LOG_LEVEL: 'trace',
      SIDECAR_MAX_BODY_BYTES: '4096',
      SIDECAR_UPSTREAM_CONNECT_RETRY_DEADLINE_MS: '300',
      SIDECAR_TOKEN_LOGIN_BACKOFF_MAX_MS: '200',
    });
    const { egressUrl } = world.running.sidecar;
    const { faults } = world.simulator;
    const logs = world.running.logs;
    await provokeGatewayErrors(world);
    // Every refusal the sidecar makes by itself.
    const refused: Array<[string, Promise<{ code: string | undefined }>]> = [
      ['sidecar.route.not_found', postJson(egressUrl, '{}', '/api/v2/other')],
      ['sidecar.body.invalid_json', postJson(egressUrl, '{"amount":')],
      ['sidecar.body.not_object', postJson(egressUrl, '[1]')],
      ['sidecar.body.too_large', postJson(egressUrl, JSON.stringify({ pad: 'x'.repeat(5000) }))],
      ['sidecar.body.unsupported_media_type', postJson(egressUrl, '{}', undefined, { 'content-type': 'text/plain' })],
      [
        'sidecar.method.not_allowed',
        fetch(`${egressUrl}/api/v2/transaction/init`).then(async (r) => ({
          code: ((await r.json()) as { code?: string }).code,
        })),
      ],
    ];
    for (const [code, answer] of refused) assert.equal((await answer).code, code);
    await abandonBody(egressUrl);
    await until('the abandoned body is logged', 3_000, () => logs.text.includes('sidecar.body.incomplete'));
    // Refresh rejected -> password login (fallback) -> the retried request succeeds.
    faults.inject({ kind: '401', target: 'signed' });
    faults.inject({ kind: '401', target: 'token' });
    assert.equal((await postJson(egressUrl, deposit())).status, 200);
    // Refresh and login both rejected: the gateway's own 401 FAILED goes back; during the backoff that follows,
    // the next client is told at once that no token is available; the backoff retry then gets one.
    faults.inject({ kind: '401', target: 'signed' });
    faults.inject({ kind: '401', target: 'token', count: 2 });
    const noFreshToken = await postJson(egressUrl, deposit());
    assert.deepEqual([noFreshToken.status, noFreshToken.code], [401, 'FAILED']);
    assert.equal((await postJson(egressUrl, deposit())).code, 'sidecar.token.unavailable');
    await waitUntilReady(world.running.sidecar);
    faults.inject({ kind: 'reset' });
    assert.equal((await postJson(egressUrl, deposit())).code, 'sidecar.upstream.outcome_unknown');
    const tagged = await postJson(egressUrl, deposit(), undefined, { 'x-request-id': 'trace-me-42' });
    assert.equal(tagged.requestId, 'trace-me-42');
    await world.relay.stop();
    assert.equal((await postJson(egressUrl, deposit())).code, 'sidecar.upstream.unreachable');
    await world.running.stop();
    text = logs.text;
    lines = logs.lines();
  });

  after(async () => {
    await world?.stop();
  });

  it('contains no password, token, private key line, signature, data value or payload', () => {
    const secrets: Array<[string, string]> = [
      ['password', TEST_PASSWORD],
      ...world.relay.seen.accessTokens.map((t): [string, string] => ['access token', t]),
      ...world.relay.seen.refreshTokens.map((t): [string, string] => ['refresh token', t]),
      ...world.otherTokens.map((t): [string, string] => ['token of another login', t]),
      ...world.relay.seen.signatures.map((s): [string, string] => ['X-Signature', s]),
      ...world.relay.seen.data.map((d): [string, string] => ['data', d]),
      ...sentPayloads.map((p): [string, string] => ['payload', p]),
      ...world.keys.privateKeyPem
        .split('\n')
        .filter((l) => l !== '' && !l.startsWith('-----'))
        .map((l): [string, string] => ['private key line', l]),
    ];
    assert.ok(world.relay.seen.accessTokens.length >= 4, 'logins and refreshes happened');
    assert.ok(world.relay.seen.signatures.length >= 10, 'signed requests went out');
    for (const [kind, value] of secrets) assert.equal(text.includes(value), false, `a ${kind} is in the logs`);
    assert.equal(text.includes('PRIVATE KEY'), false);
  });

  it('logs one line per request with id, route, status, codes, attempts, duration and the payload digest', () => {
    const requests = lines.filter((l) => l.event === 'request');
    const codes = new Set(requests.map((l) => l.code));
    for (const code of SIDECAR_CODES) assert.ok(codes.has(code), `a request line for ${code}`);
    // FAILED is not here: the sidecar retries it with a fresh token, so that request ends "ok" after 2 attempts.
    for (const code of ['ok', ...GATEWAY_ERROR_CODES.filter((label) => label !== 'FAILED')]) {
      assert.ok(codes.has(code), `a request line for ${code}`);
    }
    for (const l of requests) {
      assert.equal(typeof l.requestId, 'string');
      assert.equal(typeof l.route, 'string');
      assert.equal(typeof l.status, 'number');
      assert.equal(typeof l.attempts, 'number');
      assert.equal(typeof l.durationMs, 'number');
    }
    const tagged = requests.find((l) => l.requestId === 'trace-me-42');
    assert.equal(tagged?.code, 'ok');
    const payload = sentPayloads.at(-2) ?? '';
    assert.equal(tagged.payloadSha256, createHash('sha256').update(payload).digest('hex'));
    assert.equal(tagged.payloadBytes, Buffer.byteLength(payload));
    const retried = requests.find((l) => l.gatewayCode === undefined && l.code === 'ok' && l.attempts === 2);
    assert.ok(retried, 'the request retried after FAILED logs attempts: 2');
    assert.ok(requests.some((l) => l.gatewayCode === 'signature.nonce.replayed'));
    // Sent once without an answer: the log must say a copy reached the gateway (the payment may exist).
    const unknown = requests.find((l) => l.code === 'sidecar.upstream.outcome_unknown');
    assert.equal(unknown?.attempts, 1);
    assert.equal(requests.find((l) => l.code === 'sidecar.upstream.unreachable')?.attempts, 0);
  });

  it('logs the signing string with data replaced by its SHA-256 at warn on signature.verify.failed', () => {
    const diagnostic = lines.find((l) => l.event === 'signature.verify.failed');
    assert.ok(diagnostic, 'a signature.verify.failed line');
    assert.equal(diagnostic.level, 40);
    const signing = String(diagnostic.signingString);
    const match =
      /^POST\.(http:\/\/127\.0\.0\.1:\d+\/api\/v2\/transaction\/init)\.(\d{10})\.([A-Za-z0-9_-]{22})\.sha256:([0-9a-f]{64})$/.exec(
        signing,
      );
    assert.ok(match, signing);
    assert.equal(match[1], `${world.relay.url}/api/v2/transaction/init`);
    const digests = world.relay.seen.data.map((d) => createHash('sha256').update(d).digest('hex'));
    assert.ok(digests.includes(match[4] ?? ''), 'the digest is of the data the sidecar signed');
  });

  it('logs token events with grant, outcome and expiry', () => {
    const granted = lines.filter((l) => l.event === 'token.granted');
    assert.ok(granted.some((l) => l.grant === 'password'));
    assert.ok(granted.some((l) => l.grant === 'refresh_token'));
    for (const l of granted) {
      assert.match(String(l.accessExpiresAt), /^\d{4}-\d\d-\d\dT/);
      assert.match(String(l.refreshExpiresAt), /^\d{4}-\d\d-\d\dT/);
    }
    assert.ok(
      lines.some((l) => l.event === 'token.fallback'),
      'refresh failed, fell back to the password',
    );
    assert.ok(lines.some((l) => l.event === 'token.rejected_grant' && l.grant === 'password'));
    assert.ok(
      lines.some((l) => l.event === 'token.rejected'),
      'the gateway refusing a token is logged',
    );
  });
});

describe('serve against a gateway that echoes the request into its refusals', () => {
  it('logs the refused grants and the refused request with their codes, never the password or a token', async () => {
    const keys = await makeKeys();
    const gateway = await new EchoingGateway(1).start();
    const passwordFile = join(keys.dir, 'echoed-password');
    await writeFile(passwordFile, `${ECHOED_PASSWORD}\n`, { mode: 0o600 });
    const env = await sidecarEnv(keys, gateway.url, {
      SIDECAR_PASSWORD_FILE: passwordFile,
      SIDECAR_LOG_LEVEL: 'trace',
      SIDECAR_TOKEN_LOGIN_BACKOFF_MAX_MS: '200',
    });
    const sidecar = await spawnSidecar(env);
    try {
      // 400 echoing the bearer; then 401 FAILED: refresh refused, login refused, both echoing their secret.
      assert.equal((await postJson(sidecar.proxyUrl, deposit())).status, 400);
      assert.equal((await postJson(sidecar.proxyUrl, deposit())).status, 401);
      await until('two refused logins', 10_000, () => gateway.refusals.filter((g) => g === 'password').length >= 2);
      sidecar.child.kill('SIGTERM');
      assert.equal((await sidecar.exited).code, 0);
    } finally {
      await sidecar.kill();
      await gateway.stop();
    }
    const { stdout, stderr } = sidecar.output();
    const text = stdout + stderr;
    assert.deepEqual(gateway.refusals.slice(0, 2), ['refresh_token', 'password']);
    const secrets: Array<[string, string]> = [
      ['password', ECHOED_PASSWORD],
      ['password as JSON text', JSON.stringify(ECHOED_PASSWORD).slice(1, -1)],
      ...gateway.issuedTokens.map((t): [string, string] => ['token', t]),
    ];
    for (const [kind, value] of secrets) assert.equal(text.includes(value), false, `a ${kind} is in the output`);
    // What the operator needs is there: which grant, the status and the gateway's code (masked).
    const lines = stdout
      .split('\n')
      .filter((l) => l.startsWith('{'))
      .map((l) => JSON.parse(l) as Line);
    const refused = lines.filter((l) => l.event === 'token.rejected_grant');
    for (const grant of ['refresh_token', 'password']) {
      const line = refused.find((l) => l.grant === grant);
      assert.equal(line?.status, 401, `a refused ${grant} grant is logged`);
      assert.match(String(line.code), /^FAILED \[redacted\] in \{"grant_type":/);
      assert.equal(line.gatewayMessage, undefined, 'the message is never kept');
    }
    const request = lines.find((l) => l.event === 'request' && l.status === 400);
    assert.equal(request?.gatewayCode, 'invalid.request Bearer [redacted]');
  });
});
