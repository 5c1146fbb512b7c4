// The connection policy (src/inbound/connection-policy.ts, paced-connection.ts) on a real listener: one request parsed
// and answered at a time per connection, what is pipelined behind it held unparsed or refused, bodies whole, and each
// refusal counted by reason.
import assert from 'node:assert/strict';
import type { IncomingMessage, Server, ServerResponse } from 'node:http';
import { connect, type AddressInfo } from 'node:net';
import { afterEach, describe, it } from 'node:test';
import {
  createPolicyServer,
  type ConnectionPolicy,
  type ConnectionRefusal,
} from '../../src/inbound/connection-policy.js';
import { headerBlockLength } from '../../src/inbound/paced-connection.js';

const POLICY: ConnectionPolicy = {
  maxConnections: 8,
  maxConnectionsPerSource: 4,
  maxHeaderBytes: 1024,
  headersTimeoutMs: 1_000,
  requestTimeoutMs: 2_000,
  keepAliveTimeoutMs: 5_000,
  idleTimeoutMs: 0,
  checkIntervalMs: 200,
};

interface Served {
  readonly server: Server;
  readonly port: number;
  readonly refused: ConnectionRefusal[];
  /** Each request the handler saw: its path, body, and when its handling began and its answer ended. */
  readonly seen: Array<{ path: string; body: string; began: number; answered?: number }>;
}

const servers: Server[] = [];
afterEach(() => {
  for (const server of servers.splice(0)) {
    server.closeAllConnections();
    server.close();
  }
});

/** A policy server whose handler reads the body and answers after `delayMs` with the path and body. */
async function serve(delayMs = 0, policy: ConnectionPolicy = POLICY): Promise<Served> {
  const refused: ConnectionRefusal[] = [];
  const seen: Served['seen'] = [];
  const handle = (req: IncomingMessage, res: ServerResponse) => {
    const entry: Served['seen'][number] = { path: req.url ?? '', body: '', began: Date.now() };
    seen.push(entry);
    const chunks: Buffer[] = [];
    req.on('data', (chunk: Buffer) => chunks.push(chunk));
    req.on('end', () => {
      entry.body = Buffer.concat(chunks).toString('latin1');
      setTimeout(() => {
        const text = `${entry.path} ${entry.body.length}`;
        res.writeHead(200, { 'content-length': Buffer.byteLength(text) });
        res.end(text, () => (entry.answered = Date.now()));
      }, delayMs);
    });
  };
  const server = createPolicyServer(policy, { onRefused: (reason) => refused.push(reason) }, { request: handle });
  servers.push(server);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return { server, port: (server.address() as AddressInfo).port, refused, seen };
}

/** Writes `parts` (each after `gapMs`) on one connection; resolves with everything received once it closes or `ms`. */
function exchange(
  port: number,
  parts: readonly string[],
  ms = 3_000,
  gapMs = 0,
  localAddress?: string,
): Promise<string> {
  return new Promise((resolve) => {
    const socket = connect({ port, host: '127.0.0.1', localAddress });
    let received = '';
    socket.on('data', (chunk: Buffer) => (received += chunk.toString('latin1')));
    socket.on('error', () => undefined);
    const timer = setTimeout(() => socket.destroy(), ms);
    socket.on('close', () => {
      clearTimeout(timer);
      resolve(received);
    });
    const writeAll = async () => {
      for (const part of parts) {
        socket.write(part);
        if (gapMs > 0) await new Promise((r) => setTimeout(r, gapMs));
      }
    };
    socket.once('connect', () => void writeAll());
  });
}

const get = (path: string) => `GET ${path} HTTP/1.1\r\nHost: x\r\n\r\n`;
const post = (path: string, body: string) =>
  `POST ${path} HTTP/1.1\r\nHost: x\r\nContent-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`;
const answers = (received: string) => received.split('HTTP/1.1 ').length - 1;

describe('connection policy: one request at a time per connection', () => {
  it('finds a header block whatever its line ends, and empty lines before it', () => {
    assert.equal(headerBlockLength(Buffer.from('GET / HTTP/1.1\r\nHost: x\r\n\r\nGET')), 27);
    assert.equal(headerBlockLength(Buffer.from('GET / HTTP/1.1\nHost: x\n\nGET')), 24);
    assert.equal(headerBlockLength(Buffer.from('\r\n\r\nGET / HTTP/1.1\r\n\r\n')), 22);
    assert.equal(headerBlockLength(Buffer.from('GET / HTTP/1.1\r\nHost: x\r\n')), -1);
  });

  it('two thousand pipelined requests in one write: one is handled and answered, the rest never parsed', async () => {
    const served = await serve();
    const received = await exchange(served.port, [get('/first').repeat(2_000)]);
    assert.equal(served.seen.length, 1, 'the handler saw one request');
    assert.equal(answers(received), 1, 'one answer, then the connection closed');
    assert.match(received, /\r\n\r\n\/first 0$/);
    assert.deepEqual(served.refused, ['pipelined']);
  });

  it('a request sent before the answer to the one before it waits, unparsed, until that answer is written', async () => {
    const served = await serve(300);
    const received = await exchange(
      served.port,
      [post('/one', 'a'.repeat(100)), post('/two', 'b'.repeat(50))],
      3_000,
      50,
    );
    assert.equal(answers(received), 2);
    const [one, two] = served.seen;
    assert.deepEqual(
      served.seen.map((s) => `${s.path} ${s.body.length}`),
      ['/one 100', '/two 50'],
    );
    assert.ok(one?.answered !== undefined && two !== undefined && two.began >= one.answered, 'parsed after the answer');
    assert.deepEqual(served.refused, []);
  });

  it('keep-alive requests one after another, bodies split across writes, a chunked body: all whole', async () => {
    const served = await serve();
    const body = 'x'.repeat(5_000);
    const head = `POST /split HTTP/1.1\r\nHost: x\r\nContent-Length: ${body.length}\r\n\r\n`;
    const chunked = `POST /chunked HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n${(3000).toString(16)}\r\n${'c'.repeat(3000)}\r\n0\r\n\r\n`;
    const received = await exchange(
      served.port,
      [head, body.slice(0, 1_000), body.slice(1_000), chunked, get('/last')],
      3_000,
      150,
    );
    assert.equal(answers(received), 3);
    assert.deepEqual(
      served.seen.map((s) => `${s.path} ${s.body.length}`),
      ['/split 5000', '/chunked 3000', '/last 0'],
    );
  });

  it('a request pipelined behind a chunked body in the same write is not handled; the connection closes after the answer', async () => {
    const served = await serve();
    const chunked = `POST /chunked HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n`;
    const received = await exchange(served.port, [chunked + get('/behind')]);
    assert.deepEqual(
      served.seen.map((s) => s.path),
      ['/chunked'],
    );
    assert.equal(answers(received), 1);
    assert.deepEqual(served.refused, ['pipelined']);
  });

  it('HTTP/1.1 requests without Host, pipelined: Node answers the first 400 and closes; no handler runs', async () => {
    const served = await serve();
    const received = await exchange(served.port, ['GET / HTTP/1.1\r\n\r\n'.repeat(1_000)]);
    assert.equal(served.seen.length, 0);
    assert.equal(answers(received), 1);
    assert.match(received, /^HTTP\/1\.1 400 /);
  });
});

describe('connection policy: caps and deadlines, each refusal counted', () => {
  it('past the per-source cap a new connection from that address is closed; another address still connects', async () => {
    const served = await serve(2_000);
    const held = Array.from({ length: 4 }, () => exchange(served.port, [get('/held')], 3_000, 0, '127.0.0.2'));
    await new Promise((resolve) => setTimeout(resolve, 300));
    assert.equal(await exchange(served.port, [get('/more')], 1_000, 0, '127.0.0.2'), '', 'closed unanswered');
    assert.match(await exchange(served.port, [get('/other')], 3_000, 0, '127.0.0.3'), /^HTTP\/1\.1 200 /);
    await Promise.all(held);
    assert.deepEqual(served.refused, ['per_source']);
  });

  it('headers too large: 431; headers too slow: 408; a line that is no HTTP: 400', async () => {
    const served = await serve();
    assert.match(
      await exchange(served.port, [`GET / HTTP/1.1\r\nX: ${'a'.repeat(2_000)}\r\n\r\n`]),
      /^HTTP\/1\.1 431 /,
    );
    assert.match(await exchange(served.port, ['GET / HTTP/1.1\r\nHost: x\r\n'], 3_000), /^HTTP\/1\.1 408 /);
    assert.match(await exchange(served.port, ['NOT HTTP AT ALL\r\n\r\n']), /^HTTP\/1\.1 400 /);
    assert.deepEqual(served.refused.sort(), ['headers_too_large', 'malformed', 'timeout']);
  });
});
