// The admin listener's idle deadline (src/observability/admin-listener.ts): a client that asks for an answer and
// never reads it holds its connection only until nothing has moved for 10 s, looked at every 10 s: within 20 s
// (Node's first look after a write began takes it for one in progress). Over loopback the kernel takes in
// several MB of an answer unread, so the answer here is made larger than that; the real /metrics, about 150 KB,
// stalls only behind a small TCP window on a real network.
import assert from 'node:assert/strict';
import type { Server } from 'node:http';
import { connect, type AddressInfo } from 'node:net';
import { after, before, describe, it } from 'node:test';
import { Registry } from 'prom-client';
import { createAdminServer } from '../../src/observability/health.js';

const ANSWER_BYTES = 64 * 1024 * 1024;
const IDLE_MS = 10_000;
/** On a loaded shared machine a timer can come late. */
const SLACK_MS = 3_000;

describe('admin listener: a client that never reads its answer', () => {
  let server: Server;
  let port = 0;
  before(async () => {
    const registry = new Registry();
    const huge = 'x'.repeat(ANSWER_BYTES);
    registry.metrics = () => Promise.resolve(huge);
    server = createAdminServer({
      registry,
      health: { started: () => true, ready: () => true, serving: () => true, token: () => ({ valid: false }) },
      readinessRequiresToken: false,
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    port = (server.address() as AddressInfo).port;
  });
  after(() => {
    server.closeAllConnections();
    server.close();
  });

  it(
    'is dropped once nothing moved for 10 to 20 s: reading at last, it finds the answer cut short',
    { timeout: 60_000 },
    async () => {
      const socket = connect(port, '127.0.0.1');
      socket.on('error', () => undefined);
      try {
        // Paused from the start: nothing is read until the deadline has passed.
        socket.pause();
        socket.write('GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n');
        await new Promise((resolve) => setTimeout(resolve, 2 * IDLE_MS + SLACK_MS));
        let received = 0;
        socket.on('data', (chunk: Buffer) => (received += chunk.length));
        const ended = new Promise<boolean>((resolve) => {
          socket.once('close', () => resolve(true));
          setTimeout(() => resolve(false), SLACK_MS).unref();
        });
        socket.resume();
        assert.equal(await ended, true, 'the connection was closed by the listener');
        assert.ok(received > 0 && received < ANSWER_BYTES, `received ${received} of ${ANSWER_BYTES} bytes`);
      } finally {
        socket.destroy();
      }
    },
  );
});
