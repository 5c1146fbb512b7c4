// A client that ends its side of the connection (half-closes) before the body it declared is whole can still read an
// answer: it gets the listener's own, with a stable code, and the connection closes right after it. One that resets
// is gone: nothing can be answered (its log line says delivered: false, test/e2e/log-secrets.test.ts).
import assert from 'node:assert/strict';
import type { Server } from 'node:http';
import { connect, type AddressInfo } from 'node:net';
import { after, before, describe, it } from 'node:test';
import { createPolicyServer, type ConnectionRefusal } from '../../src/inbound/connection-policy.js';
import { makeKeys } from '../support/keys.js';
import { RecordingGateway } from '../support/recording-gateway.js';
import { sidecarEnv, startTestSidecar, waitUntilReady, type TestSidecar } from '../support/sidecar.js';

interface Exchange {
  /** Everything the client read until the connection closed. */
  readonly received: string;
  /** From the half-close to the connection's close. */
  readonly closedAfterMs: number;
}

/** Writes `head` and `body` on a new connection to `url`, half-closes it, and reads until it closes. */
async function halfClosed(url: string, head: string, body: string): Promise<Exchange> {
  const { hostname, port } = new URL(url);
  const socket = connect(Number(port), hostname);
  const chunks: Buffer[] = [];
  socket.on('data', (chunk: Buffer) => chunks.push(chunk));
  socket.on('error', () => undefined);
  const closed = new Promise<void>((resolve) => socket.on('close', () => resolve()));
  await new Promise<void>((resolve) => socket.once('connect', resolve));
  socket.write(head + body);
  // The body's bytes reach the server before the end of the stream does.
  await new Promise((resolve) => setTimeout(resolve, 50));
  const endedAt = performance.now();
  socket.end();
  const timer = setTimeout(() => socket.destroy(), 10_000);
  await closed;
  clearTimeout(timer);
  return { received: Buffer.concat(chunks).toString('latin1'), closedAfterMs: performance.now() - endedAt };
}

function answerOf(received: string): { status: number; head: string; body: string } {
  const end = received.indexOf('\r\n\r\n');
  const head = received.slice(0, end);
  return { status: Number(head.split(' ')[1]), head: head.toLowerCase(), body: received.slice(end + 4) };
}

/** Well under every linger and keep-alive bound (5 s): the connection closes once the answer is written. */
const PROMPTLY_MS = 2_000;

describe('a body cut short by a half-close, on the egress listener', () => {
  let gateway: RecordingGateway;
  let running: TestSidecar;
  const deposit = (framing: string) =>
    `POST /api/v2/transaction/init HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n${framing}\r\n\r\n`;

  before(async () => {
    gateway = await new RecordingGateway().start();
    running = await startTestSidecar(await sidecarEnv(await makeKeys(), gateway.url));
    await waitUntilReady(running.sidecar);
  });
  after(async () => {
    await running.stop();
    await gateway.stop();
  });

  for (const [what, framing, body] of [
    ['short of its Content-Length', 'Content-Length: 500', '{"amount":'],
    ['inside a chunk', 'Transfer-Encoding: chunked', '20\r\n{"amount":'],
  ] as const) {
    it(`${what}: 400 sidecar.body.incomplete, retryable, and the connection closes after it`, async () => {
      const exchange = await halfClosed(running.sidecar.egressUrl, deposit(framing), body);
      const answer = answerOf(exchange.received);
      assert.equal(answer.status, 400, exchange.received);
      assert.deepEqual(JSON.parse(answer.body), {
        code: 'sidecar.body.incomplete',
        message: 'the request body was not received completely',
        retryable: true,
      });
      assert.match(answer.head, /\r\nx-request-id: /);
      assert.match(answer.head, /\r\nconnection: close/);
      assert.ok(exchange.closedAfterMs < PROMPTLY_MS, `closed ${exchange.closedAfterMs} ms after the half-close`);
      assert.equal(gateway.requests.length, 0, 'nothing was sent');
    });
  }

  it('a half-close inside the head is still answered by the policy: a bare 400', async () => {
    const exchange = await halfClosed(running.sidecar.egressUrl, 'POST /api/v2/transaction/init HTTP/1.1\r\n', 'Ho');
    assert.equal(exchange.received, 'HTTP/1.1 400 Bad Request\r\nConnection: close\r\n\r\n');
  });
});

describe('a body cut short by a half-close, on a listener that does not read it', () => {
  let server: Server;
  const refused: ConnectionRefusal[] = [];
  before(async () => {
    const policy = {
      maxConnections: 8,
      maxConnectionsPerSource: 4,
      maxHeaderBytes: 1024,
      headersTimeoutMs: 1_000,
      requestTimeoutMs: 10_000,
      keepAliveTimeoutMs: 5_000,
      idleTimeoutMs: 0,
      checkIntervalMs: 200,
    };
    // Answers after a while, body unread (an admin route): its answer is the one the client reads.
    server = createPolicyServer(
      policy,
      { onRefused: (reason) => refused.push(reason) },
      {
        request: (_req, res) => {
          setTimeout(() => res.writeHead(200, { 'content-length': 2 }).end('ok'), 100);
        },
      },
    );
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  });
  after(() => {
    server.closeAllConnections();
    server.close();
  });

  it("the listener's own answer, then the connection closes (not kept alive)", async () => {
    const { port } = server.address() as AddressInfo;
    const head = 'POST /x HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 100\r\n\r\n';
    const exchange = await halfClosed(`http://127.0.0.1:${port}`, head, '{"a":');
    const answer = answerOf(exchange.received);
    assert.deepEqual([answer.status, answer.body], [200, 'ok']);
    assert.ok(exchange.closedAfterMs < PROMPTLY_MS, `closed ${exchange.closedAfterMs} ms after the half-close`);
    assert.deepEqual(refused, [], 'answered, not refused');
  });
});
