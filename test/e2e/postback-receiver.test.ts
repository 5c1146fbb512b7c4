// The simulator's real signed postbacks, end to end: a deposit through the sidecar's egress path, completed on the
// simulator, whose signed postback goes to the sidecar's receiver and reaches an application as plain JSON.
import assert from 'node:assert/strict';
import { writeFile } from 'node:fs/promises';
import { connect, type Socket } from 'node:net';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { startSimulator, type RunningSimulator } from '@signing-sidecar/simulator';
import { freeStablePort } from '../support/free-port.js';
import { makeKeys } from '../support/keys.js';
import { TEST_PASSWORD, TEST_USERNAME } from '../support/recording-gateway.js';
import { postJson, deposit } from '../support/sim-world.js';
import { scratchDir } from '../support/scratch.js';
import { sidecarEnv, startTestSidecar, waitUntilReady, type TestSidecar } from '../support/sidecar.js';
import { ApplicationStub, postbackLines } from '../postback/support.js';

let sim: RunningSimulator;
let running: TestSidecar;
let application: ApplicationStub;
let receiverUrl: string;

before(async () => {
  const keys = await makeKeys();
  application = await new ApplicationStub().start();
  const port = await freeStablePort();
  // The URL registered with the gateway: here the receiver's own address (in production, the Ingress's).
  const webhookUrl = `http://127.0.0.1:${port}/hooks/payments`;
  sim = await startSimulator({
    accounts: [
      {
        username: TEST_USERNAME,
        password: TEST_PASSWORD,
        publicKeyPem: keys.publicKeyPem,
        webhookUrl,
        signedPostbacks: true,
      },
    ],
    postbackRetry: { initialDelayMs: 100, maxDelayMs: 200 },
  });
  const keyFile = join(scratchDir('sim-postback-key-'), 'gateway-postback.pub.pem');
  await writeFile(keyFile, sim.postbackPublicKeyPem);
  running = await startTestSidecar(
    await sidecarEnv(keys, sim.baseUrl, {
      SIDECAR_LOG_LEVEL: 'info',
      SIDECAR_POSTBACK_FORWARD_URL: application.url,
      SIDECAR_POSTBACK_PUBLIC_URL: webhookUrl,
      SIDECAR_POSTBACK_PUBLIC_KEY_FILE: keyFile,
      SIDECAR_POSTBACK_LISTEN_HOST: '127.0.0.1',
      SIDECAR_POSTBACK_LISTEN_PORT: String(port),
      SIDECAR_POSTBACK_MAX_CONNECTIONS: '4',
    }),
  );
  receiverUrl = running.sidecar.postbackUrl!;
  await waitUntilReady(running.sidecar);
});
after(async () => {
  await running.stop();
  await sim.close();
  await application.stop();
});

async function depositAndComplete(status: 'SUCCESS' | 'FAILED'): Promise<{ id: string; invoice: string }> {
  const payload = deposit();
  const answer = await postJson(running.sidecar.egressUrl, payload);
  assert.equal(answer.status, 200, answer.body);
  const id = (JSON.parse(answer.body) as { transaction_id: string }).transaction_id;
  await sim.complete(id, status);
  return { id, invoice: (JSON.parse(payload) as { invoice_no: string }).invoice_no };
}

const receivedFor = (id: string) =>
  application.received.filter(
    (r) => (JSON.parse(r.body.toString('utf8')) as { transaction_id?: string }).transaction_id === id,
  );

async function until(condition: () => boolean, ms = 10_000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!condition()) {
    if (Date.now() > deadline) throw new Error('timed out');
    await new Promise((r) => setTimeout(r, 20));
  }
}

describe('signed postbacks from the simulator', () => {
  test('arrive at the application as verified plain JSON, once', async () => {
    const { id, invoice } = await depositAndComplete('SUCCESS');
    await until(() => receivedFor(id).length === 1);
    const [got] = receivedFor(id);
    const json = JSON.parse(got!.body.toString('utf8')) as Record<string, string>;
    assert.equal(json.status, 'SUCCESS');
    assert.equal(json.invoice_no, invoice);
    assert.equal(got!.headers['x-postback-verified'], 'signature');
    await until(() => sim.postbacks().some((a) => a.transactionId === id && a.delivered));
    assert.equal(sim.postbacks().filter((a) => a.transactionId === id).length, 1, 'the gateway got 200 at once');
    const line = postbackLines(running).find((l) => l.outcome === 'forwarded' && l.nonce !== undefined);
    assert.ok(line, 'one log line per postback');
    assert.ok(!running.logs.text.includes(invoice), 'the payload is never logged');
  });

  test('an application that fails is retried by the gateway and the postback goes through once', async () => {
    let failures = 2;
    application.status = () => (failures-- > 0 ? 503 : 200);
    try {
      const { id } = await depositAndComplete('FAILED');
      await until(() => sim.postbacks().some((a) => a.transactionId === id && a.delivered));
      const attempts = sim.postbacks().filter((a) => a.transactionId === id);
      assert.deepEqual(
        attempts.map((a) => a.status),
        [503, 503, 200],
      );
      assert.equal(receivedFor(id).length, 3, 'two failed deliveries, one that went through');
      assert.equal(receivedFor(id).filter((r) => r.headers['x-postback-verified'] === 'signature').length, 3);
    } finally {
      application.status = () => 200;
    }
  });
});

describe('a hostile sender', () => {
  test('holding every receiver connection does not slow the egress path', async () => {
    const { port } = new URL(receiverUrl);
    const sockets: Socket[] = [];
    try {
      for (let i = 0; i < 6; i++) {
        const socket = connect(Number(port), '127.0.0.1');
        socket.on('error', () => undefined);
        // A request head that never ends: the connection stays open until the receiver's header timeout.
        socket.write('POST /hooks/payments HTTP/1.1\r\nHost: x\r\n');
        sockets.push(socket);
      }
      await new Promise((r) => setTimeout(r, 200));
      const started = Date.now();
      const answer = await postJson(running.sidecar.egressUrl, deposit());
      assert.equal(answer.status, 200, answer.body);
      assert.ok(Date.now() - started < 2_000);
      const refused = sockets.filter((s) => s.destroyed).length;
      assert.ok(refused >= 2, `connections past the cap of 4 are refused (${refused} closed)`);
    } finally {
      for (const socket of sockets) socket.destroy();
    }
  });
});
