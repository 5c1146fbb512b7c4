import assert from 'node:assert/strict';
import { createServer, type AddressInfo, type Server, type Socket } from 'node:net';
import { after, before, describe, it } from 'node:test';
import { parseBaseAddress } from '../../src/config/base-url.js';
import { startSimulator, type RunningSimulator } from '../../src/simulator/index.js';
import { createForwarder } from '../../src/upstream/forwarder.js';
import { makeKeys } from '../support/keys.js';

const BASE_OPTIONS = { ca: undefined, connectTimeoutMs: 2_000, responseTimeoutMs: 2_000, connections: 2 };
const REQUEST = { path: '/api/v2/auth/token', headers: { 'content-type': 'application/json' }, body: '{}' };

/** A raw TCP server, for misbehaviour an HTTP server would not produce. */
async function tcpServer(onSocket: (socket: Socket) => void): Promise<{ server: Server; url: string }> {
  const server = createServer(onSocket);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return { server, url: `http://127.0.0.1:${port}` };
}

// The same contract for both clients: the native one (the default) and undici (the fallback setting).
for (const client of ['native', 'undici'] as const) describe(`forwarder (${client}): did any byte leave?`, () => {
  const OPTIONS = { ...BASE_OPTIONS, client };
  let sim: RunningSimulator;
  before(async () => {
    const keys = await makeKeys();
    sim = await startSimulator({ tls: true, accounts: [{ username: 'u@example.com', password: 'pw', publicKeyPem: keys.publicKeyPem }] });
  });
  after(() => sim.close());

  it('refused connection: not sent, transient (worth retrying)', async () => {
    const { server, url } = await tcpServer(() => undefined);
    await new Promise<void>((resolve) => server.close(() => resolve()));
    const forwarder = createForwarder(parseBaseAddress(url), OPTIONS);
    const outcome = await forwarder.send(REQUEST);
    assert.equal(outcome.kind, 'not_sent');
    assert.equal(outcome.kind === 'not_sent' && outcome.transient, true);
    await forwarder.close();
  });

  it('untrusted TLS certificate: not sent, and not transient (retrying cannot heal it)', async () => {
    const forwarder = createForwarder(parseBaseAddress(sim.baseUrl), OPTIONS);
    const outcome = await forwarder.send(REQUEST);
    assert.equal(outcome.kind, 'not_sent');
    assert.equal(outcome.kind === 'not_sent' && outcome.transient, false);
    await forwarder.close();
  });

  it('trusted through the extra CA: the gateway answers', async () => {
    const forwarder = createForwarder(parseBaseAddress(sim.baseUrl), { ...OPTIONS, ca: sim.caPem });
    const outcome = await forwarder.send(REQUEST);
    assert.equal(outcome.kind, 'response');
    assert.equal(outcome.kind === 'response' && outcome.response.status, 400);
    await forwarder.close();
  });

  it('connection reset after the request was read: sent, no answer', async () => {
    const { server, url } = await tcpServer((socket) => socket.once('data', () => socket.resetAndDestroy()));
    const forwarder = createForwarder(parseBaseAddress(url), OPTIONS);
    const outcome = await forwarder.send(REQUEST);
    assert.equal(outcome.kind, 'sent_no_answer');
    assert.equal(outcome.kind === 'sent_no_answer' && outcome.timedOut, false);
    await forwarder.close();
    server.close();
  });

  it('answer cut short (10 bytes promised, 3 sent, then closed): sent, no answer', async () => {
    const { server, url } = await tcpServer((socket) =>
      socket.once('data', () => socket.end('HTTP/1.1 201 Created\r\ncontent-length: 10\r\n\r\nabc')),
    );
    const forwarder = createForwarder(parseBaseAddress(url), OPTIONS);
    const outcome = await forwarder.send(REQUEST);
    assert.equal(outcome.kind, 'sent_no_answer');
    await forwarder.close();
    server.close();
  });

  it('header bytes 0x80-0xFF leave as the same bytes (latin1), the body as UTF-8', async (t) => {
    const received: Buffer[] = [];
    const { server, url } = await tcpServer((socket) =>
      socket.on('data', (chunk: Buffer) => {
        received.push(chunk);
        if (Buffer.concat(received).includes('}')) socket.end('HTTP/1.1 204 No Content\r\n\r\n');
      }),
    );
    const forwarder = createForwarder(parseBaseAddress(url), OPTIONS);
    t.after(async () => {
      await forwarder.destroy();
      server.close();
    });
    const outcome = await forwarder.send({ ...REQUEST, headers: { 'x-note': 'caf\u00e9' }, body: '{"name":"caf\u00e9"}' });
    assert.equal(outcome.kind, 'response');
    const bytes = Buffer.concat(received);
    assert.ok(bytes.includes(Buffer.from('x-note: caf\xe9\r\n', 'latin1')), 'header value as latin1');
    assert.ok(bytes.includes(Buffer.from('{"name":"caf\u00e9"}', 'utf8')), 'body as UTF-8');
    assert.match(bytes.toString('latin1'), /content-length: 16\r\n/i);
  });

  it('a request waiting longer than connectTimeoutMs for a free connection: not sent, transient, never written', async (t) => {
    const paths: string[] = [];
    const { server, url } = await tcpServer((socket) =>
      socket.on('data', (chunk: Buffer) => {
        paths.push(chunk.toString('latin1').split(' ')[1] ?? '');
        setTimeout(() => socket.write('HTTP/1.1 204 No Content\r\n\r\n'), 400);
      }),
    );
    const forwarder = createForwarder(parseBaseAddress(url), { ...OPTIONS, connections: 1, connectTimeoutMs: 100 });
    t.after(async () => {
      await forwarder.destroy();
      server.close();
    });
    const first = forwarder.send({ ...REQUEST, path: '/first' });
    const second = await forwarder.send({ ...REQUEST, path: '/second' });
    assert.equal(second.kind, 'not_sent');
    assert.equal(second.kind === 'not_sent' && second.transient, true);
    assert.equal(second.kind === 'not_sent' && (second.error as { code?: string }).code, 'ERR_GATEWAY_POOL_TIMEOUT');
    assert.equal((await first).kind, 'response');
    assert.deepEqual(paths, ['/first']);
  });

  it('close() answers the request in flight and the one waiting for a connection, then resolves', async (t) => {
    const { server, url } = await tcpServer((socket) =>
      socket.on('data', () => setTimeout(() => socket.write('HTTP/1.1 204 No Content\r\n\r\n'), 50)),
    );
    const forwarder = createForwarder(parseBaseAddress(url), { ...OPTIONS, connections: 1 });
    t.after(() => server.close());
    const sends = [forwarder.send(REQUEST), forwarder.send(REQUEST)];
    await forwarder.close();
    assert.deepEqual((await Promise.all(sends)).map((o) => o.kind), ['response', 'response']);
    const late = await forwarder.send(REQUEST);
    assert.equal(late.kind === 'not_sent' && !late.transient, true, 'after close: not sent, not worth retrying');
  });

  it('destroy(): the request in flight has no answer (it was sent), the one waiting was never sent', async (t) => {
    const { server, url } = await tcpServer(() => undefined);
    const forwarder = createForwarder(parseBaseAddress(url), { ...OPTIONS, connections: 1 });
    t.after(() => server.close());
    const inFlight = forwarder.send(REQUEST);
    const waiting = forwarder.send(REQUEST);
    await new Promise((resolve) => setTimeout(resolve, 100));
    await forwarder.destroy();
    assert.equal((await inFlight).kind, 'sent_no_answer');
    assert.equal((await waiting).kind, 'not_sent');
  });

  it('a header value that would start a header of its own: not sent, not transient, no byte written', async () => {
    let received = 0;
    const { server, url } = await tcpServer((socket) => socket.on('data', (chunk: Buffer) => (received += chunk.length)));
    const forwarder = createForwarder(parseBaseAddress(url), OPTIONS);
    const outcome = await forwarder.send({ ...REQUEST, headers: { authorization: 'Bearer tok\r\nx-evil: 1' } });
    assert.equal(outcome.kind, 'not_sent');
    assert.equal(outcome.kind === 'not_sent' && outcome.transient, false);
    assert.doesNotMatch(outcome.kind === 'not_sent' ? outcome.error.message : '', /tok|evil/);
    await forwarder.destroy();
    await new Promise<void>((resolve) => server.close(() => resolve()));
    assert.equal(received, 0);
  });

  it('no answer within the response timeout: sent, no answer, timed out', async () => {
    const { server, url } = await tcpServer(() => undefined);
    const forwarder = createForwarder(parseBaseAddress(url), { ...OPTIONS, responseTimeoutMs: 200 });
    const outcome = await forwarder.send(REQUEST);
    assert.equal(outcome.kind, 'sent_no_answer');
    assert.equal(outcome.kind === 'sent_no_answer' && outcome.timedOut, true);
    await forwarder.destroy();
    server.close();
  });
});
