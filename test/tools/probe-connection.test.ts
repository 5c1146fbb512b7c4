// The "base URL reachable" probe names the phase that failed: a refused or timed-out TCP connect is not a TLS
// problem, and a TLS problem is only reported once TCP is up.
import assert from 'node:assert/strict';
import { createServer, type Socket } from 'node:net';
import { after, describe, it } from 'node:test';
import { parseBaseAddress } from '../../src/config/base-url.js';
import { probeConnection } from '../../src/tools/probe-connection.js';
import { freeStablePort } from '../support/free-port.js';

const servers: (() => Promise<void>)[] = [];

/** A TCP server on 127.0.0.1 that hands it each connection; closed (with its sockets) when the suite ends. */
async function tcpServer(onSocket: (socket: Socket) => void): Promise<number> {
  const sockets = new Set<Socket>();
  const server = createServer((socket) => {
    sockets.add(socket);
    socket.on('error', () => undefined);
    socket.on('close', () => sockets.delete(socket));
    onSocket(socket);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  servers.push(() => {
    for (const s of sockets) s.destroy();
    return new Promise<void>((resolve) => server.close(() => resolve()));
  });
  const address = server.address();
  if (address === null || typeof address === 'string') throw new Error('no TCP address');
  return address.port;
}

describe('probeConnection', () => {
  after(() => Promise.all(servers.map((close) => close())));

  it('https:// with nothing listening: the TCP connect failed, not the TLS handshake', async () => {
    const port = await freeStablePort();
    const result = await probeConnection(parseBaseAddress(`https://127.0.0.1:${port}`), undefined, 2000);
    assert.equal(result.mark, '✘');
    assert.equal(result.detail, 'TCP connect failed: ECONNREFUSED');
  });

  it('http:// with nothing listening: the TCP connect failed', async () => {
    const port = await freeStablePort();
    const result = await probeConnection(parseBaseAddress(`http://127.0.0.1:${port}`), undefined, 2000);
    assert.equal(result.detail, 'TCP connect failed: ECONNREFUSED');
  });

  it('a peer that accepts TCP and then hangs up: the TLS handshake failed', async () => {
    const port = await tcpServer((socket) => socket.end());
    const result = await probeConnection(parseBaseAddress(`https://127.0.0.1:${port}`), undefined, 2000);
    assert.equal(result.mark, '✘');
    assert.match(result.detail, /^TLS handshake failed: \w+$/);
  });

  it('a peer that accepts TCP and never answers the handshake: the TLS handshake timed out', async () => {
    const port = await tcpServer(() => undefined);
    const result = await probeConnection(parseBaseAddress(`https://127.0.0.1:${port}`), undefined, 300);
    assert.equal(result.detail, 'TLS handshake timed out after 300 ms');
  });
});
