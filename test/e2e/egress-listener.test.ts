import assert from 'node:assert/strict';
import { connect, type Socket } from 'node:net';
import { describe, it } from 'node:test';
import { depositJson } from '../support/payloads.js';
import { withReadySidecar, type TestSidecar } from '../support/sidecar.js';
import { waitFor } from '../support/wait-for.js';

const PATH = '/api/v2/transaction/init';

/** A raw client connection to the sidecar, collecting everything it receives until the sidecar closes it. */
function rawClient(proxyUrl: string): { socket: Socket; received: Promise<string> } {
  const { hostname, port } = new URL(proxyUrl);
  const socket = connect(Number(port), hostname);
  const chunks: Buffer[] = [];
  socket.on('data', (chunk: Buffer) => chunks.push(chunk));
  const received = new Promise<string>((resolve) => {
    socket.on('close', () => resolve(Buffer.concat(chunks).toString('utf8')));
    socket.on('error', () => undefined);
  });
  return { socket, received };
}

function requestLines(running: TestSidecar): Array<Record<string, unknown>> {
  return running.logs.lines().filter((line) => line.event === 'request');
}

describe('egress listener', () => {
  it('a caller that disconnects before its answer: the line says the answer was not delivered', async () => {
    await withReadySidecar({}, async ({ gateway, running }) => {
      gateway.holdUntil = Number.MAX_SAFE_INTEGER;
      const body = depositJson({ invoice_no: 'inv-gone' });
      const { socket } = rawClient(running.sidecar.proxyUrl);
      socket.write(
        `POST ${PATH} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\n\r\n${body}`,
      );
      await waitFor('the payment reaches the gateway', () => gateway.requests.length === 1, 3_000);
      socket.destroy();
      await new Promise((resolve) => setTimeout(resolve, 50));
      gateway.release();
      await waitFor('the request line', () => requestLines(running).length === 1, 3_000);
      const [line] = requestLines(running);
      assert.equal(line?.code, 'ok', 'the gateway accepted it: the payment may exist');
      assert.equal(line?.delivered, false);
      assert.equal(line?.attempts, 1);
    });
  });

  it('an answered caller: no delivered field in its line', async () => {
    await withReadySidecar({}, async ({ running }) => {
      const answer = await fetch(`${running.sidecar.proxyUrl}${PATH}`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: depositJson(),
      });
      await answer.arrayBuffer();
      await waitFor('the request line', () => requestLines(running).length === 1, 3_000);
      assert.equal(Object.hasOwn(requestLines(running)[0] ?? {}, 'delivered'), false);
    });
  });

  it('shutdown while a body is still arriving: 503 retryable (nothing was sent), logged and counted', async () => {
    const env = { SIDECAR_SHUTDOWN_DRAIN_DELAY_MS: '0', SIDECAR_SHUTDOWN_MAX_DELAY_MS: '300' };
    await withReadySidecar(env, async ({ gateway, running }) => {
      const { socket, received } = rawClient(running.sidecar.proxyUrl);
      socket.write(
        `POST ${PATH} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 500\r\n\r\n{"amount":`,
      );
      await new Promise((resolve) => setTimeout(resolve, 100));
      await running.stop();
      const answer = await received;
      assert.match(answer, /^HTTP\/1\.1 503 /);
      const body = JSON.parse(answer.slice(answer.indexOf('\r\n\r\n') + 4)) as { code: string; retryable: boolean };
      assert.deepEqual([body.code, body.retryable], ['sidecar.shutdown.draining', true]);
      assert.equal(gateway.requests.length, 0, 'nothing reached the gateway');
      await waitFor('the request line', () => requestLines(running).length === 1, 3_000);
      const [line] = requestLines(running);
      assert.equal(line?.status, 503);
      assert.equal(line?.code, 'sidecar.shutdown.draining');
      assert.equal(line?.attempts, 0);
      assert.ok(running.logs.lines().some((l) => l.event === 'shutdown.done' && l.answeredNotSent === 1));
      const metrics = await running.sidecar.metrics.registry.metrics();
      assert.match(metrics, /signing_sidecar_requests_total\{[^}]*code="sidecar\.shutdown\.draining"[^}]*\} 1/);
    });
  });

  it('a caller that never finishes its headers is cut off after 10 s with 408', { timeout: 30_000 }, async () => {
    await withReadySidecar({}, async ({ running }) => {
      const { socket, received } = rawClient(running.sidecar.proxyUrl);
      const started = Date.now();
      socket.write(`POST ${PATH} HTTP/1.1\r\nHost: x\r\n`);
      const answer = await received;
      assert.match(answer, /^HTTP\/1\.1 408 /);
      assert.ok(Date.now() - started >= 9_000, 'not before the headers timeout');
    });
  });
});
