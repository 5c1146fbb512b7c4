// The real sidecar in front of the gateway simulator, with a GatewayRelay between them, and the steps that make
// the simulator answer each gateway error code of spec 7. Shared by the Prometheus and the log-secrets tests.
import assert from 'node:assert/strict';
import { startSimulator, type RunningSimulator } from '@signing-sidecar/simulator';
import { GatewayRelay } from './gateway-relay.js';
import { makeKeys, type TestKeys } from './keys.js';
import { TEST_PASSWORD, TEST_USERNAME } from './recording-gateway.js';
import { sidecarEnv, startTestSidecar, waitUntilReady, type TestSidecar } from './sidecar.js';

export const DEPOSIT_PATH = '/api/v2/transaction/init';

export interface SimWorld {
  readonly keys: TestKeys;
  readonly relay: GatewayRelay;
  readonly simulator: RunningSimulator;
  readonly running: TestSidecar;
  /** Access and refresh tokens the test itself obtained from the simulator (never seen by the sidecar). */
  readonly otherTokens: string[];
  stop(): Promise<void>;
}

export async function startSimWorld(extraEnv: NodeJS.ProcessEnv = {}): Promise<SimWorld> {
  const keys = await makeKeys();
  const relay = await new GatewayRelay().start();
  const simulator = await startSimulator({
    accounts: [{ username: TEST_USERNAME, password: TEST_PASSWORD, publicKeyPem: keys.publicKeyPem }],
    publicBaseUrl: relay.url,
  });
  relay.pointAt(simulator.listenUrl);
  const running = await startTestSidecar(await sidecarEnv(keys, relay.url, extraEnv));
  await waitUntilReady(running.sidecar);
  return {
    keys,
    relay,
    simulator,
    running,
    otherTokens: [],
    async stop() {
      await running.stop();
      await relay.stop();
      await simulator.close();
    },
  };
}

export interface Answer {
  readonly status: number;
  readonly body: string;
  readonly code: string | undefined;
  readonly requestId: string | null;
}

export async function postJson(
  egressUrl: string,
  body: string,
  path = DEPOSIT_PATH,
  headers: Record<string, string> = {},
): Promise<Answer> {
  const res = await fetch(`${egressUrl}${path}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body,
  });
  const text = await res.text();
  let code: string | undefined;
  try {
    const parsed = JSON.parse(text) as { code?: unknown };
    code = typeof parsed.code === 'string' ? parsed.code : undefined;
  } catch {
    code = undefined;
  }
  return { status: res.status, body: text, code, requestId: res.headers.get('x-request-id') };
}

let invoice = 0;
/** Every payload deposit() made, for tests that check no payload reached a log. */
export const sentPayloads: string[] = [];

/** A fresh deposit payload each time, so every `data` value is distinct. */
export function deposit(): string {
  invoice++;
  const payload = JSON.stringify({
    amount: `${invoice}.00`,
    currency: 'USD',
    gateway: 'card',
    user_id: 'u-1',
    invoice_no: `inv-${invoice}-${Date.now()}`,
  });
  sentPayloads.push(payload);
  return payload;
}

/** The gateway error codes provoked by provokeGatewayErrors, as the metric labels them. */
export const PROVOKED_CODES = [
  'signature.nonce.replayed',
  'signature.verify.failed',
  'ip.forbidden',
  'signature.timestamp.expired',
  'signature.timestamp.future',
  'other',
  'FAILED',
] as const;

/**
 * Sends one request per gateway error code through the sidecar and checks that the client got the gateway's own
 * answer. The order matters: the replay must reuse a request whose token and timestamp are still good, and the
 * superseding login (FAILED) comes last because it changes the token.
 */
export async function provokeGatewayErrors(world: SimWorld): Promise<void> {
  const { egressUrl } = world.running.sidecar;
  const expect = async (code: string, status: number): Promise<void> => {
    const answer = await postJson(egressUrl, deposit());
    assert.equal(answer.status, status, `${code}: ${answer.body}`);
    if (code !== 'ip.forbidden' && code !== 'other') assert.equal(answer.code, code, answer.body);
  };
  assert.equal((await postJson(egressUrl, deposit())).status, 200, 'a plain deposit succeeds first');
  world.relay.mode = 'replay';
  await expect('signature.nonce.replayed', 401);
  world.relay.mode = 'tamper';
  await expect('signature.verify.failed', 401);
  world.relay.mode = 'foreign-ip';
  await expect('ip.forbidden', 403);
  world.simulator.clock.setOffset(120);
  await expect('signature.timestamp.expired', 401);
  world.simulator.clock.setOffset(-30);
  await expect('signature.timestamp.future', 401);
  world.simulator.clock.setOffset(0);
  world.simulator.faults.inject({ kind: '5xx', status: 503 });
  await expect('other', 503);
  // Another password login for the same account supersedes the sidecar's access token (spec 4.1 rule 3): the
  // gateway answers 401 FAILED, the sidecar refreshes and retries once, and the client sees the success.
  world.otherTokens.push(...(await passwordLogin(world.simulator.listenUrl)));
  assert.equal((await postJson(egressUrl, deposit())).status, 200, 'retried after FAILED with a fresh token');
}

/** A password login straight to the simulator, as a second backend with the same account would do. */
export async function passwordLogin(simulatorUrl: string): Promise<string[]> {
  const res = await fetch(`${simulatorUrl}/api/v2/auth/token`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ grant_type: 'password', username: TEST_USERNAME, password: TEST_PASSWORD }),
  });
  assert.equal(res.status, 200);
  const body = (await res.json()) as { access_token: string; refresh_token: string };
  return [body.access_token, body.refresh_token];
}
