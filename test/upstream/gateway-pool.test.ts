import assert from 'node:assert/strict';
import { createServer, type AddressInfo, type Server, type Socket } from 'node:net';
import { describe, it, type TestContext } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { parseBaseAddress } from '../../src/config/base-url.js';
import {
  createForwarder,
  errorCode,
  type Forwarder,
  type ForwarderOptions,
  type SendOutcome,
  type UpstreamRequest,
  type UpstreamResponse,
} from '../../src/upstream/forwarder.js';
import { freePort } from '../../bench/processes.js';

/**
 * The native HTTP/1.1 client (GatewayPool) against raw TCP servers that script the gateway byte by byte. The one
 * question every test here comes back to: could the request have reached the gateway? If it could, the outcome
 * must never be `not_sent` (the caller would retry a payment the gateway may already have made).
 */

// ---------------------------------------------------------------------------------------------------------------
// A scripted gateway: records every byte and every connection, and hands each complete request to a script.

interface ServerSideConnection {
  readonly index: number;
  readonly socket: Socket;
  /** Every byte the client sent on this connection. */
  bytes: Buffer;
  /** The client sent FIN (or the connection went away). */
  ended: boolean;
  closed: boolean;
}

interface ReceivedRequest {
  readonly connection: ServerSideConnection;
  readonly raw: Buffer;
  readonly path: string;
  readonly body: Buffer;
}

type Script = (request: ReceivedRequest, socket: Socket) => void;

class ScriptedGateway {
  readonly connections: ServerSideConnection[] = [];
  readonly requests: ReceivedRequest[] = [];
  /** Most connections open at the same time, as the server saw them. */
  maxOpen = 0;
  private open = 0;
  port = 0;

  private constructor(
    private readonly server: Server,
    private readonly script: Script,
  ) {}

  static async start(t: TestContext, script: Script = () => undefined): Promise<ScriptedGateway> {
    const server = createServer();
    const gateway = new ScriptedGateway(server, script);
    server.on('connection', (socket: Socket) => gateway.accept(socket));
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    gateway.port = (server.address() as AddressInfo).port;
    t.after(() => gateway.stop());
    return gateway;
  }

  get url(): string {
    return `http://127.0.0.1:${this.port}`;
  }

  get allClosed(): boolean {
    return this.connections.every((c) => c.closed);
  }

  async stop(): Promise<void> {
    for (const connection of this.connections) connection.socket.destroy();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }

  private accept(socket: Socket): void {
    const connection: ServerSideConnection = { index: this.connections.length, socket, bytes: Buffer.alloc(0), ended: false, closed: false };
    this.connections.push(connection);
    this.open++;
    this.maxOpen = Math.max(this.maxOpen, this.open);
    let pending = Buffer.alloc(0);
    socket.on('data', (chunk: Buffer) => {
      connection.bytes = Buffer.concat([connection.bytes, chunk]);
      pending = Buffer.concat([pending, chunk]);
      for (;;) {
        const headEnd = pending.indexOf('\r\n\r\n');
        if (headEnd < 0) return;
        const head = pending.toString('latin1', 0, headEnd);
        const length = Number(/\r\ncontent-length: *(\d+)/i.exec(head)?.[1] ?? 0);
        const total = headEnd + 4 + length;
        if (pending.length < total) return;
        const raw = pending.subarray(0, total);
        pending = pending.subarray(total);
        const path = head.split(' ')[1] ?? '';
        const request = { connection, raw, path, body: raw.subarray(headEnd + 4) };
        this.requests.push(request);
        this.script(request, socket);
      }
    });
    socket.on('end', () => (connection.ended = true));
    // Writes to a socket the client already dropped are expected in several tests.
    socket.on('error', () => undefined);
    socket.on('close', () => {
      connection.ended = true;
      connection.closed = true;
      this.open--;
    });
  }
}

// ---------------------------------------------------------------------------------------------------------------
// Helpers

const BASE_OPTIONS: ForwarderOptions = { ca: undefined, connectTimeoutMs: 1_000, responseTimeoutMs: 1_000, connections: 2 };

function forwarderFor(t: TestContext, url: string, options: Partial<ForwarderOptions> = {}): Forwarder {
  const forwarder = createForwarder(parseBaseAddress(url), { ...BASE_OPTIONS, ...options });
  // Idempotent after close()/destroy(): guarantees no socket outlives a failed test.
  t.after(() => forwarder.destroy());
  return forwarder;
}

function request(path = '/api/v2/payments', headers: Record<string, string> = { 'content-type': 'application/json' }, body = '{}'): UpstreamRequest {
  return { path, headers, body };
}

function reply(socket: Socket, body: string, options: { status?: string; headers?: string; version?: string } = {}): void {
  const bytes = Buffer.from(body, 'utf8');
  const head = `HTTP/${options.version ?? '1.1'} ${options.status ?? '200 OK'}\r\ncontent-length: ${bytes.length}\r\n${options.headers ?? ''}\r\n`;
  // One write: two would meet Nagle and delayed ACK on the server side (40 ms a request).
  socket.write(Buffer.concat([Buffer.from(head, 'latin1'), bytes]));
}

function describeOutcome(outcome: SendOutcome): string {
  if (outcome.kind === 'response') return `response ${outcome.response.status} ${outcome.response.body.toString('utf8')}`;
  return `${outcome.kind} ${errorCode(outcome.error)}: ${outcome.error.message}`;
}

function responseOf(outcome: SendOutcome): UpstreamResponse {
  if (outcome.kind !== 'response') assert.fail(`expected a response, got ${describeOutcome(outcome)}`);
  return outcome.response;
}

function bodyOf(outcome: SendOutcome): string {
  return responseOf(outcome).body.toString('utf8');
}

/** Sends /a, waits for `between`, sends /b: each must get its own answer. */
async function aThenB(forwarder: Forwarder, between: () => Promise<unknown>): Promise<void> {
  assert.equal(bodyOf(await forwarder.send(request('/a'))), '/a');
  await between();
  assert.equal(bodyOf(await forwarder.send(request('/b'))), '/b');
}

function notSent(outcome: SendOutcome): Extract<SendOutcome, { kind: 'not_sent' }> {
  if (outcome.kind !== 'not_sent') assert.fail(`expected not_sent, got ${describeOutcome(outcome)}`);
  return outcome;
}

function sentNoAnswer(outcome: SendOutcome): Extract<SendOutcome, { kind: 'sent_no_answer' }> {
  if (outcome.kind !== 'sent_no_answer') assert.fail(`expected sent_no_answer, got ${describeOutcome(outcome)}`);
  return outcome;
}

/** The code is what reaches the logs: a short constant, never free text. */
function assertLogCode(error: Error, expected: string): void {
  const code = errorCode(error);
  assert.equal(code, expected, `error code (message: ${error.message})`);
  assert.match(code, /^[A-Z][A-Z0-9_]{2,63}$/);
}

async function waitFor(condition: () => boolean, what: string, timeoutMs = 1_000): Promise<void> {
  const deadline = performance.now() + timeoutMs;
  while (!condition()) {
    if (performance.now() > deadline) assert.fail(`timed out after ${timeoutMs} ms waiting for: ${what}`);
    await sleep(5);
  }
}


/** A hang (a promise that never settles) fails the test instead of stalling the file. */
const T = { timeout: 3_000 };

const echoPath: Script = (req, socket) => reply(socket, req.path);

// ---------------------------------------------------------------------------------------------------------------

describe('GatewayPool: the request on the wire', () => {
  it('writes exactly the request line, host, caller headers in order, the UTF-8 byte length and the body', T, async (t) => {
    const gateway = await ScriptedGateway.start(t, (_req, socket) => reply(socket, '{"ok":true}'));
    const forwarder = forwarderFor(t, gateway.url);
    const body = '{"payee":"Zoë Ångström","memo":"東京 🎉 €5"}';
    assert.ok(Buffer.byteLength(body) > body.length, 'the body has multi-byte characters');
    const path = '/api/v2/payments?ref=a%20b&x=1';
    const headers = { 'content-type': 'application/json', 'X-Request-Id': 'req-42', authorization: 'Bearer t0k3n' };

    const response = responseOf(await forwarder.send({ path, headers, body }));
    assert.equal(response.status, 200);
    assert.equal(response.body.toString('utf8'), '{"ok":true}');
    await forwarder.close();
    await waitFor(() => gateway.allClosed, 'the client closes its socket');

    const expected = Buffer.concat([
      Buffer.from(
        `POST ${path} HTTP/1.1\r\nhost: 127.0.0.1:${gateway.port}\r\n` +
          'content-type: application/json\r\nX-Request-Id: req-42\r\nauthorization: Bearer t0k3n\r\n' +
          `content-length: ${Buffer.byteLength(body)}\r\n\r\n`,
        'latin1',
      ),
      Buffer.from(body, 'utf8'),
    ]);
    assert.equal(gateway.connections.length, 1);
    assert.equal(gateway.connections[0]!.bytes.toString('latin1'), expected.toString('latin1'));
    assert.ok(gateway.connections[0]!.bytes.equals(expected));
  });

  it('an empty body is sent with content-length: 0', T, async (t) => {
    const gateway = await ScriptedGateway.start(t, (_req, socket) => reply(socket, 'ok'));
    const forwarder = forwarderFor(t, gateway.url);
    assert.equal(bodyOf(await forwarder.send(request('/x', {}, ''))), 'ok');
    assert.equal(gateway.requests[0]!.raw.toString('latin1'), `POST /x HTTP/1.1\r\nhost: 127.0.0.1:${gateway.port}\r\ncontent-length: 0\r\n\r\n`);
    await forwarder.close();
  });

  it('an obs-text header value (U+0080..U+00FF) leaves as the same single bytes the proxy received', T, async (t) => {
    const gateway = await ScriptedGateway.start(t, (_req, socket) => reply(socket, 'ok'));
    const forwarder = forwarderFor(t, gateway.url);
    responseOf(await forwarder.send(request('/x', { 'user-agent': 'caf\u00e9' }, '')));
    await forwarder.close();
    const raw = gateway.requests[0]!.raw;
    assert.ok(raw.includes(Buffer.from('user-agent: caf\xe9\r\n', 'latin1')), `got ${JSON.stringify(raw.toString('latin1'))}`);
  });
});

describe('GatewayPool: keep-alive and connection reuse', () => {
  it('five sequential requests share one TCP connection', T, async (t) => {
    const gateway = await ScriptedGateway.start(t, echoPath);
    const forwarder = forwarderFor(t, gateway.url);
    for (let i = 0; i < 5; i++) assert.equal(bodyOf(await forwarder.send(request(`/seq/${i}`))), `/seq/${i}`);
    assert.equal(gateway.connections.length, 1);
    assert.equal(gateway.requests.length, 5);
    await forwarder.close();
  });

  it('Connection: close from the gateway: every request gets a new connection (the client drops the old one)', T, async (t) => {
    // The server keeps each socket open, so only the client honouring the header explains new connections.
    const gateway = await ScriptedGateway.start(t, (req, socket) => reply(socket, req.path, { headers: 'Connection: close\r\n' }));
    const forwarder = forwarderFor(t, gateway.url);
    for (let i = 0; i < 5; i++) assert.equal(bodyOf(await forwarder.send(request(`/close/${i}`))), `/close/${i}`);
    assert.equal(gateway.connections.length, 5);
    assert.deepEqual(gateway.requests.map((r) => r.connection.index), [0, 1, 2, 3, 4]);
    await waitFor(() => gateway.connections.slice(0, 4).every((c) => c.ended), 'the client ends each used connection');
    await forwarder.close();
  });

  it('an HTTP/1.0 response is not reused', T, async (t) => {
    const gateway = await ScriptedGateway.start(t, (req, socket) => reply(socket, req.path, { version: '1.0' }));
    const forwarder = forwarderFor(t, gateway.url);
    assert.equal(bodyOf(await forwarder.send(request('/one'))), '/one');
    assert.equal(bodyOf(await forwarder.send(request('/two'))), '/two');
    assert.equal(gateway.connections.length, 2);
    await forwarder.close();
  });

  it('a response followed by stray bytes (a second response glued on) is not reused, and the stray answer is never handed out', T, async (t) => {
    const gateway = await ScriptedGateway.start(t, (req, socket) => {
      if (req.path === '/first') socket.write('HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nfirstHTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nstray');
      else reply(socket, req.path);
    });
    const forwarder = forwarderFor(t, gateway.url);
    assert.equal(bodyOf(await forwarder.send(request('/first'))), 'first');
    assert.equal(bodyOf(await forwarder.send(request('/second'))), '/second');
    assert.equal(gateway.connections.length, 2);
    assert.equal(gateway.requests[1]!.connection.index, 1);
    await waitFor(() => gateway.connections[0]!.ended, 'the client drops the connection it cannot trust');
    await forwarder.close();
  });

  it('chunked responses keep the connection reusable', T, async (t) => {
    const gateway = await ScriptedGateway.start(t, (req, socket) => {
      socket.write(`HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n${req.path.length.toString(16)}\r\n${req.path}\r\n0\r\n\r\n`);
    });
    const forwarder = forwarderFor(t, gateway.url);
    assert.equal(bodyOf(await forwarder.send(request('/c1'))), '/c1');
    assert.equal(bodyOf(await forwarder.send(request('/c2'))), '/c2');
    assert.equal(gateway.connections.length, 1);
    await forwarder.close();
  });
});

describe('GatewayPool: the connection limit', () => {
  it('connections: 2 with 6 concurrent requests: never more than 2 sockets, each request gets its own answer, queued ones in arrival order', T, async (t) => {
    const gateway = await ScriptedGateway.start(t, (req, socket) => setTimeout(() => reply(socket, `answer to ${req.path}`), 60));
    const forwarder = forwarderFor(t, gateway.url, { connections: 2 });
    const paths = [0, 1, 2, 3, 4, 5].map((i) => `/req/${i}`);
    const outcomes = await Promise.all(paths.map((path) => forwarder.send(request(path))));
    assert.deepEqual(outcomes.map(bodyOf), paths.map((path) => `answer to ${path}`));
    assert.equal(gateway.maxOpen, 2);
    assert.equal(gateway.connections.length, 2);
    // Two at a time: the first wave is 0 and 1, then 2 and 3 as they free up, then 4 and 5.
    const order = gateway.requests.map((r) => Number(r.path.split('/')[2]));
    const waves = [order.slice(0, 2), order.slice(2, 4), order.slice(4, 6)].map((wave) => wave.sort((a, b) => a - b));
    assert.deepEqual(waves, [[0, 1], [2, 3], [4, 5]], `server saw ${order.join(',')}`);
    await forwarder.close();
  });

  it('connections: 1: queued requests go out strictly in the order they were sent', T, async (t) => {
    const gateway = await ScriptedGateway.start(t, (req, socket) => setTimeout(() => reply(socket, req.path), 10));
    const forwarder = forwarderFor(t, gateway.url, { connections: 1 });
    const paths = ['/q/a', '/q/b', '/q/c', '/q/d', '/q/e'];
    const outcomes = await Promise.all(paths.map((path) => forwarder.send(request(path))));
    assert.deepEqual(outcomes.map(bodyOf), paths);
    assert.deepEqual(gateway.requests.map((r) => r.path), paths);
    assert.equal(gateway.connections.length, 1);
    await forwarder.close();
  });
});

describe('GatewayPool: a socket closed right after its answer', () => {
  for (const [how, close] of [
    ['ends (FIN)', (socket: Socket) => socket.end()],
    ['resets (RST)', (socket: Socket) => socket.resetAndDestroy()],
    ['sends a stray second answer', (socket: Socket) => reply(socket, 'stray')],
  ] as const) {
    it(`the gateway ${how} just after answering: the waiting request goes on a new connection, not onto that socket`, T, async (t) => {
      const gateway = await ScriptedGateway.start(t, (req, socket) => {
        reply(socket, req.path);
        // A separate segment, a moment later: it reaches the client's socket after the answer has been read.
        if (req.path === '/a') setImmediate(() => close(socket));
      });
      const forwarder = forwarderFor(t, gateway.url, { connections: 1 });
      const [a, b] = await Promise.all([forwarder.send(request('/a')), forwarder.send(request('/b'))]);
      assert.equal(bodyOf(a), '/a');
      assert.equal(bodyOf(b), '/b', 'a payment the gateway never saw must not end as outcome_unknown');
      assert.equal(gateway.connections.length, 2);
      await forwarder.close();
    });
  }
});

// Waiting for a free connection (the queue deadline) is part of the contract both clients pass: forwarder.test.ts.

describe('GatewayPool: idle connections', () => {
  it('keepAliveTimeoutMs: 150: the client closes a socket idle for longer, and the next request opens a new one', T, async (t) => {
    const gateway = await ScriptedGateway.start(t, echoPath);
    const forwarder = forwarderFor(t, gateway.url, { keepAliveTimeoutMs: 150 });
    assert.equal(bodyOf(await forwarder.send(request('/before'))), '/before');
    await sleep(300);
    // Closed by the client on its own (not only when the next request comes): the gateway never sees a stale socket.
    await waitFor(() => gateway.connections[0]!.closed, 'the client closes the expired socket', 500);
    assert.equal(bodyOf(await forwarder.send(request('/after'))), '/after');
    assert.equal(gateway.connections.length, 2);
    assert.equal(gateway.requests[1]!.connection.index, 1);
    await forwarder.close();
  });

  it('keepAliveTimeoutMs: 1000: an expired socket is not reused even before the periodic sweep has closed it', T, async (t) => {
    const gateway = await ScriptedGateway.start(t, (req, socket) => setTimeout(() => reply(socket, req.path), req.path === '/before' ? 50 : 0));
    const forwarder = forwarderFor(t, gateway.url, { keepAliveTimeoutMs: 1_000 });
    const created = performance.now(); // the sweep runs every 1000 ms from here: at 1000, then 2000
    assert.equal(bodyOf(await forwarder.send(request('/before'))), '/before'); // idle from ~55 ms, expired from ~1055 ms
    await sleep(Math.max(0, created + 1_400 - performance.now()));
    assert.equal(bodyOf(await forwarder.send(request('/after'))), '/after');
    assert.equal(gateway.requests[1]!.connection.index, 1, 'the expired socket was not reused');
    await waitFor(() => gateway.connections[0]!.closed, 'the client closes the expired socket');
    await forwarder.close();
  });

  it('keepAliveTimeoutMs: 150: a socket idle for less is reused', T, async (t) => {
    const gateway = await ScriptedGateway.start(t, echoPath);
    const forwarder = forwarderFor(t, gateway.url, { keepAliveTimeoutMs: 150 });
    await aThenB(forwarder, () => sleep(30));
    assert.equal(gateway.connections.length, 1);
    await forwarder.close();
  });

  it('Keep-Alive: timeout=1 from the gateway (1 s minus the 1 s margin): the socket is not kept', T, async (t) => {
    const gateway = await ScriptedGateway.start(t, (req, socket) => reply(socket, req.path, { headers: 'Keep-Alive: timeout=1\r\n' }));
    const forwarder = forwarderFor(t, gateway.url);
    await aThenB(forwarder, () => waitFor(() => gateway.connections[0]!.closed, 'the client closes the socket at once', 300));
    assert.equal(gateway.connections.length, 2);
    await forwarder.close();
  });

  it('Keep-Alive: timeout=5 from the gateway: the socket is kept and reused', T, async (t) => {
    const gateway = await ScriptedGateway.start(t, (req, socket) => reply(socket, req.path, { headers: 'Keep-Alive: timeout=5, max=100\r\n' }));
    const forwarder = forwarderFor(t, gateway.url);
    await aThenB(forwarder, () => sleep(20));
    assert.equal(gateway.connections.length, 1);
    await forwarder.close();
  });

  it('the gateway closes an idle keep-alive socket: the next request goes on a fresh connection and is answered', T, async (t) => {
    const gateway = await ScriptedGateway.start(t, (req, socket) => {
      reply(socket, req.path);
      if (req.connection.index === 0) setTimeout(() => socket.end(), 20);
    });
    const forwarder = forwarderFor(t, gateway.url);
    // Once the server sees the socket fully closed, the client has seen the FIN and answered it.
    await aThenB(forwarder, () => waitFor(() => gateway.connections[0]!.closed, 'the FIN reaches the client'));
    assert.equal(gateway.connections.length, 2);
    assert.equal(gateway.requests[1]!.connection.index, 1);
    await forwarder.close();
  });
});

describe('GatewayPool: sent, no answer (the gateway may have acted)', () => {
  it('the gateway reads the request and closes without answering', T, async (t) => {
    const gateway = await ScriptedGateway.start(t, (_req, socket) => socket.end());
    const forwarder = forwarderFor(t, gateway.url);
    const outcome = sentNoAnswer(await forwarder.send(request('/pay')));
    assert.equal(outcome.timedOut, false);
    assertLogCode(outcome.error, 'ERR_GATEWAY_CLOSED');
    assert.equal(gateway.requests.length, 1, 'the request did reach the gateway');
    await forwarder.close();
  });

  it('half a response (Content-Length 10, 3 body bytes) and then the gateway closes', T, async (t) => {
    const gateway = await ScriptedGateway.start(t, (_req, socket) => {
      socket.write('HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nabc');
      setTimeout(() => socket.end(), 20);
    });
    const forwarder = forwarderFor(t, gateway.url);
    const outcome = sentNoAnswer(await forwarder.send(request('/pay')));
    assert.equal(outcome.timedOut, false);
    assertLogCode(outcome.error, 'ERR_GATEWAY_CLOSED');
    await forwarder.close();
  });

  it('the gateway never answers: sent_no_answer, timed out, after responseTimeoutMs; the socket is dropped and a late answer is never handed to the next request', T, async (t) => {
    const gateway = await ScriptedGateway.start(t, (req, socket) => {
      if (req.path === '/slow') setTimeout(() => reply(socket, 'late answer'), 300);
      else reply(socket, req.path);
    });
    const forwarder = forwarderFor(t, gateway.url, { responseTimeoutMs: 150, connections: 1 });
    const started = performance.now();
    const outcome = sentNoAnswer(await forwarder.send(request('/slow')));
    const elapsed = performance.now() - started;
    assert.equal(outcome.timedOut, true);
    assertLogCode(outcome.error, 'ERR_GATEWAY_RESPONSE_TIMEOUT');
    assert.ok(elapsed >= 140 && elapsed < 1_000, `answered after ${elapsed.toFixed(0)} ms`);
    await waitFor(() => gateway.connections[0]!.closed, 'the client drops the socket the answer might still arrive on');
    assert.equal(bodyOf(await forwarder.send(request('/next'))), '/next');
    assert.equal(gateway.connections.length, 2);
    await forwarder.close();
  });

  it('a malformed status line (HTTP/1.1 2OO OK) is refused at once, not guessed at', T, async (t) => {
    const gateway = await ScriptedGateway.start(t, (_req, socket) => socket.write('HTTP/1.1 2OO OK\r\ncontent-length: 2\r\n\r\nok'));
    const forwarder = forwarderFor(t, gateway.url, { responseTimeoutMs: 2_000 });
    const started = performance.now();
    const outcome = sentNoAnswer(await forwarder.send(request('/pay')));
    assert.equal(outcome.timedOut, false);
    assertLogCode(outcome.error, 'ERR_GATEWAY_RESPONSE_INVALID');
    assert.ok(performance.now() - started < 1_000, 'not left to the response timeout');
    await waitFor(() => gateway.connections[0]!.closed, 'the client drops the socket');
    await forwarder.close();
  });

  it('a response larger than maxResponseBytes (declared or close-delimited) is refused; one at the limit is accepted', T, async (t) => {
    const gateway = await ScriptedGateway.start(t, (req, socket) => {
      if (req.path === '/declared') reply(socket, '12345678901');
      else if (req.path === '/at-limit') reply(socket, '1234567890');
      else {
        socket.write('HTTP/1.1 200 OK\r\n\r\n123456');
        setTimeout(() => socket.end('78901'), 10);
      }
    });
    const forwarder = forwarderFor(t, gateway.url, { maxResponseBytes: 10 });
    const declared = sentNoAnswer(await forwarder.send(request('/declared')));
    assert.equal(declared.timedOut, false);
    assertLogCode(declared.error, 'ERR_GATEWAY_RESPONSE_TOO_LARGE');
    const streamed = sentNoAnswer(await forwarder.send(request('/streamed')));
    assert.equal(streamed.timedOut, false);
    assertLogCode(streamed.error, 'ERR_GATEWAY_RESPONSE_TOO_LARGE');
    assert.equal(bodyOf(await forwarder.send(request('/at-limit'))), '1234567890');
    await forwarder.close();
  });
});

describe('GatewayPool: not sent (safe to retry when transient)', () => {
  it('connection refused: not_sent, transient', T, async (t) => {
    const port = await freePort();
    const forwarder = forwarderFor(t, `http://127.0.0.1:${port}`);
    const outcome = notSent(await forwarder.send(request()));
    assert.equal(outcome.transient, true);
    assertLogCode(outcome.error, 'ECONNREFUSED');
    await forwarder.close();
  });

  it('https:// to a server that accepts TCP but never completes the TLS handshake: not_sent after connectTimeoutMs, transient', T, async (t) => {
    const gateway = await ScriptedGateway.start(t);
    const forwarder = forwarderFor(t, `https://127.0.0.1:${gateway.port}`, { connectTimeoutMs: 150, responseTimeoutMs: 2_000 });
    const started = performance.now();
    const outcome = notSent(await forwarder.send(request('/pay', { 'content-type': 'application/json' }, '{"amount":1}')));
    const elapsed = performance.now() - started;
    assert.equal(outcome.transient, true);
    assertLogCode(outcome.error, 'ERR_GATEWAY_CONNECT_TIMEOUT');
    assert.ok(elapsed >= 140 && elapsed < 1_000, `gave up after ${elapsed.toFixed(0)} ms`);
    const bytes = gateway.connections[0]!.bytes;
    assert.equal(bytes[0], 0x16, 'only a TLS handshake record arrived');
    assert.ok(!bytes.includes('POST') && !bytes.includes('amount'), 'no byte of the request left');
    await waitFor(() => gateway.connections[0]!.closed, 'the client drops the half-open socket');
    await forwarder.close();
  });

  it('destroy() while the connection is still being set up: not_sent (nothing was written)', T, async (t) => {
    const gateway = await ScriptedGateway.start(t);
    const forwarder = forwarderFor(t, `https://127.0.0.1:${gateway.port}`, { connectTimeoutMs: 2_000 });
    const sending = forwarder.send(request());
    await waitFor(() => gateway.connections.length === 1 && gateway.connections[0]!.bytes.length > 0, 'the TLS hello arrives');
    await forwarder.destroy();
    const outcome = notSent(await sending);
    assert.equal(outcome.transient, false);
    assert.ok(!gateway.connections[0]!.bytes.includes('POST'));
  });

  it('a header value with CR/LF/NUL (header injection): not_sent, not transient, nothing reaches the gateway, the value is never quoted', T, async (t) => {
    const gateway = await ScriptedGateway.start(t, echoPath);
    const forwarder = forwarderFor(t, gateway.url);
    const secret = 'sk_live_SECRET123';
    for (const value of [`Bearer ${secret}\r\nx-evil: 1`, `Bearer ${secret}\nx-evil: 1`, `Bearer ${secret}\r`, `Bearer ${secret}\0`]) {
      const outcome = notSent(await forwarder.send(request('/pay', { 'content-type': 'application/json', authorization: value }, '{}')));
      assert.equal(outcome.transient, false);
      assertLogCode(outcome.error, 'ERR_INVALID_UPSTREAM_REQUEST');
      assert.ok(!outcome.error.message.includes(secret), `message quotes the value: ${outcome.error.message}`);
      assert.ok(!String(outcome.error.stack).includes(secret), 'stack quotes the value');
      assert.match(outcome.error.message, /authorization/, 'the message names the header');
    }
    await sleep(20);
    assert.equal(gateway.connections.length, 0, 'no connection was opened for them');
    // The pool is not poisoned: a valid request afterwards goes through.
    assert.equal(bodyOf(await forwarder.send(request('/ok'))), '/ok');
    assert.equal(gateway.requests.length, 1);
    assert.ok(!gateway.connections[0]!.bytes.includes(secret));
    await forwarder.close();
  });

  const unwritable: Array<[string, UpstreamRequest[]]> = [
    [
      'a caller-set framing header (content-length, transfer-encoding, host)',
      ([{ 'Content-Length': '0' }, { 'transfer-encoding': 'chunked' }, { Host: 'evil.example' }] as Record<string, string>[]).map((headers) =>
        request('/pay', headers, '{}'),
      ),
    ],
    ['a path with a space or CRLF', ['/api/v2/pay ments', '/api/v2/pay HTTP/1.1\r\nx-evil: 1\r\n\r\nPOST /x'].map((path) => request(path))],
  ];
  for (const [what, requests] of unwritable) {
    it(`${what}: not_sent, not transient, nothing sent`, T, async (t) => {
      const gateway = await ScriptedGateway.start(t, echoPath);
      const forwarder = forwarderFor(t, gateway.url);
      for (const bad of requests) {
        const outcome = notSent(await forwarder.send(bad));
        assert.equal(outcome.transient, false);
        assertLogCode(outcome.error, 'ERR_INVALID_UPSTREAM_REQUEST');
      }
      // A valid request afterwards: the gateway sees one connection carrying only that request.
      assert.equal(bodyOf(await forwarder.send(request('/valid'))), '/valid');
      assert.equal(gateway.connections.length, 1);
      assert.deepEqual(gateway.requests.map((r) => r.path), ['/valid']);
      assert.doesNotMatch(gateway.requests[0]!.raw.toString('latin1'), /evil|pay/);
      await forwarder.close();
    });
  }
});

describe('GatewayPool: response framing', () => {
  it('a close-delimited response (no Content-Length, not chunked) is complete when the gateway ends the connection', T, async (t) => {
    const body = 'first part, €, then the rest';
    const bytes = Buffer.from(body, 'utf8');
    const gateway = await ScriptedGateway.start(t, (_req, socket) => {
      socket.write('HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\n\r\n');
      socket.write(bytes.subarray(0, 13)); // splits the euro sign
      setTimeout(() => socket.end(bytes.subarray(13)), 20);
    });
    const forwarder = forwarderFor(t, gateway.url);
    const response = responseOf(await forwarder.send(request()));
    assert.equal(response.status, 200);
    assert.ok(response.body.equals(bytes), `got ${JSON.stringify(response.body.toString('utf8'))}`);
    await forwarder.close();
  });

  it('a chunked response (chunks split across packets, with an extension and a trailer) is decoded', T, async (t) => {
    const gateway = await ScriptedGateway.start(t, (_req, socket) => {
      socket.write('HTTP/1.1 201 Created\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhel');
      setTimeout(() => socket.write('lo\r\n8;ext=1\r\n, world!\r\n'), 10);
      setTimeout(() => socket.write('0\r\nx-trailer: t\r\n\r\n'), 20);
    });
    const forwarder = forwarderFor(t, gateway.url);
    const response = responseOf(await forwarder.send(request()));
    assert.equal(response.status, 201);
    assert.equal(response.body.toString('utf8'), 'hello, world!');
    assert.equal(response.headers['x-trailer'], undefined, 'trailers are not merged into the headers');
    await forwarder.close();
  });

  it('interim 100 Continue and 103 Early Hints are skipped: the final status and only its headers are returned', T, async (t) => {
    const gateway = await ScriptedGateway.start(t, (_req, socket) => {
      socket.write('HTTP/1.1 100 Continue\r\n\r\n');
      setTimeout(() => socket.write('HTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload\r\n\r\n'), 10);
      setTimeout(() => reply(socket, '{"id":"p_1"}', { status: '201 Created', headers: 'x-final: yes\r\n' }), 20);
    });
    const forwarder = forwarderFor(t, gateway.url);
    const response = responseOf(await forwarder.send(request()));
    assert.equal(response.status, 201);
    assert.equal(response.body.toString('utf8'), '{"id":"p_1"}');
    assert.equal(response.headers['x-final'], 'yes');
    assert.equal(response.headers.link, undefined);
    await forwarder.close();
  });

  it('response headers: names lowercased, repeated fields become arrays in order, surrounding spaces trimmed', T, async (t) => {
    const gateway = await ScriptedGateway.start(t, (_req, socket) =>
      reply(socket, '{}', {
        headers: 'Content-Type: application/json\r\nSet-Cookie: a=1\r\nset-cookie: b=2\r\nX-Multi: 1\r\nx-multi: 2\r\nX-MULTI: 3\r\nX-Trace-Id:  T-1 \r\n',
      }),
    );
    const forwarder = forwarderFor(t, gateway.url);
    const { headers } = responseOf(await forwarder.send(request()));
    assert.deepEqual({ ...headers }, {
      'content-length': '2',
      'content-type': 'application/json',
      'set-cookie': ['a=1', 'b=2'],
      'x-multi': ['1', '2', '3'],
      'x-trace-id': 'T-1',
    });
    await forwarder.close();
  });
});

describe('GatewayPool: close() and destroy()', () => {
  it('close() lets the request in flight finish (it gets its answer), then resolves; later sends are not_sent, not transient', T, async (t) => {
    const gateway = await ScriptedGateway.start(t, (req, socket) => setTimeout(() => reply(socket, `done ${req.path}`), 100));
    const forwarder = forwarderFor(t, gateway.url);
    const sending = forwarder.send(request('/inflight'));
    let answered = false;
    void sending.then(() => (answered = true));
    await waitFor(() => gateway.requests.length === 1, 'the request reaches the gateway');
    await forwarder.close();
    assert.equal(answered, true, 'close() resolved only after the request in flight was settled');
    assert.equal(bodyOf(await sending), 'done /inflight');
    const late = notSent(await forwarder.send(request('/late')));
    assert.equal(late.transient, false);
    assertLogCode(late.error, 'ERR_FORWARDER_CLOSED');
    await waitFor(() => gateway.allClosed, 'the gateway sees the socket closed');
    assert.equal(gateway.requests.length, 1, 'nothing was written after close()');
  });

  it('close() with requests queued behind the connection limit serves them all before resolving', T, async (t) => {
    const gateway = await ScriptedGateway.start(t, (req, socket) => setTimeout(() => reply(socket, req.path), 30));
    const forwarder = forwarderFor(t, gateway.url, { connections: 1 });
    const sending = ['/1', '/2', '/3'].map((path) => forwarder.send(request(path)));
    await waitFor(() => gateway.requests.length === 1, 'the first request reaches the gateway');
    await forwarder.close();
    assert.deepEqual((await Promise.all(sending)).map(bodyOf), ['/1', '/2', '/3']);
    assert.equal(gateway.connections.length, 1);
  });

  it('destroy(): the request in flight is sent_no_answer; the one queued behind the limit is not_sent (never written)', T, async (t) => {
    const gateway = await ScriptedGateway.start(t); // never answers
    const forwarder = forwarderFor(t, gateway.url, { connections: 1, responseTimeoutMs: 5_000 });
    const inFlight = forwarder.send(request('/in-flight'));
    const queued = forwarder.send(request('/queued'));
    await waitFor(() => gateway.requests.length === 1, 'the first request reaches the gateway');
    const started = performance.now();
    await forwarder.destroy();
    assert.ok(performance.now() - started < 1_000, 'destroy() does not wait for answers');
    const first = sentNoAnswer(await inFlight);
    assert.equal(first.timedOut, false);
    assertLogCode(first.error, 'ERR_FORWARDER_CLOSED');
    const second = notSent(await queued);
    assert.equal(second.transient, false);
    await waitFor(() => gateway.allClosed, 'the gateway sees the socket closed');
    assert.deepEqual(gateway.requests.map((r) => r.path), ['/in-flight']);
    assert.equal(gateway.connections.length, 1);
  });

  // Latent today (shutdown.ts calls close() or destroy() once), but a caller escalating a slow close() to destroy(),
  // or two callers closing the same forwarder, would wait forever if the pool kept only the latest resolver.
  it('close() escalated to destroy() while a request is in flight: both promises resolve', T, async (t) => {
    const gateway = await ScriptedGateway.start(t, (_req, socket) => setTimeout(() => reply(socket, 'late'), 100));
    const forwarder = forwarderFor(t, gateway.url);
    const sending = forwarder.send(request('/inflight'));
    await waitFor(() => gateway.requests.length === 1, 'the request reaches the gateway');
    const closing = forwarder.close().then(() => 'resolved');
    const destroying = forwarder.destroy().then(() => 'resolved');
    const within = (promise: Promise<string>): Promise<string> => Promise.race([promise, sleep(400, 'still pending')]);
    assert.equal(sentNoAnswer(await sending).timedOut, false);
    assert.equal(await within(destroying), 'resolved', 'destroy()');
    assert.equal(await within(closing), 'resolved', 'the earlier close()');
  });

  it('nothing leaks: once close() resolves, every client socket is closed', T, async (t) => {
    const gateway = await ScriptedGateway.start(t, (req, socket) => setTimeout(() => reply(socket, req.path), 30));
    const forwarder = forwarderFor(t, gateway.url, { connections: 3 });
    const outcomes = await Promise.all(['/a', '/b', '/c'].map((path) => forwarder.send(request(path))));
    assert.deepEqual(outcomes.map(bodyOf), ['/a', '/b', '/c']);
    assert.equal(gateway.connections.length, 3);
    assert.equal(gateway.connections.filter((c) => c.ended).length, 0, 'the idle sockets were kept open until close()');
    await forwarder.close();
    await waitFor(() => gateway.allClosed, 'the gateway sees all three sockets closed', 300);
  });
});
