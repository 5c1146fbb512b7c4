// The one connection policy under the sidecar's three listeners (egress, postback receiver, admin): how many
// connections, from how many sources, how large and how slow a request's head may be, and one request parsed and
// answered at a time on each connection (paced-connection.ts). Each listener states its numbers
// (docs/operations.md, "Connections"); every connection or request refused here is counted by reason.
import { createServer, STATUS_CODES, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import type { Duplex } from 'node:stream';
import { PacedConnection } from './paced-connection.js';

export interface ConnectionPolicy {
  /** Open connections at once; past it a new one is closed as it comes (reason `connections`). */
  readonly maxConnections: number;
  /** Open connections from one address; past it a new one from there is closed (reason `per_source`). */
  readonly maxConnectionsPerSource: number;
  /** A request's head (request line and headers); longer is answered 431 (reason `headers_too_large`). */
  readonly maxHeaderBytes: number;
  /** From a request's first byte to its last header; past it 408 (reason `timeout`). */
  readonly headersTimeoutMs: number;
  /** From a request's first byte to its last body byte; past it 408 (reason `timeout`). */
  readonly requestTimeoutMs: number;
  /** An idle keep-alive connection is closed after this long (not counted: the client may come back). */
  readonly keepAliveTimeoutMs: number;
  /** With a request in flight and no byte moving either way for this long, the connection is cut (reason `idle`); 0: never. */
  readonly idleTimeoutMs: number;
  /** How often Node checks the two request deadlines. */
  readonly checkIntervalMs: number;
}

/** Why a connection or request was refused (the `reason` label of signing_sidecar_connections_refused_total). */
export const CONNECTION_REFUSALS = [
  'connections',
  'per_source',
  'pipelined',
  'timeout',
  'headers_too_large',
  'malformed',
  'idle',
] as const;
export type ConnectionRefusal = (typeof CONNECTION_REFUSALS)[number];

export interface PolicyHooks {
  readonly onRefused: (reason: ConnectionRefusal) => void;
  /** Each accepted connection's socket, before any of it is read (the receiver's allow-list deadline). */
  readonly onAccepted?: (socket: Socket) => void;
}

export interface PolicyHandlers {
  readonly request: (req: IncomingMessage, res: ServerResponse) => void;
  /** A request whose Expect is not 100-continue (Node's 'checkExpectation'); its own bare 417 when absent. */
  readonly unmetExpectation?: (req: IncomingMessage, res: ServerResponse) => void;
}

/**
 * Bytes a client may write behind a request in flight before the connection counts as a pipelining flood: a
 * client that sends its next request as soon as it has read an answer can land it here a moment before the
 * answer is marked done, and that request is kept, not refused.
 */
const MAX_WAITING_BYTES = 16 * 1024;

/** An HTTP server under `policy`: `handlers` see one request at a time per connection, never a pipelined one. */
export function createPolicyServer(policy: ConnectionPolicy, hooks: PolicyHooks, handlers: PolicyHandlers): Server {
  const server = createServer(
    {
      headersTimeout: policy.headersTimeoutMs,
      requestTimeout: policy.requestTimeoutMs,
      keepAliveTimeout: policy.keepAliveTimeoutMs,
      connectionsCheckingInterval: policy.checkIntervalMs,
      maxHeaderSize: policy.maxHeaderBytes,
    },
    (req, res) => {
      if (admitted(req, res)) handlers.request(req, res);
    },
  );
  const { unmetExpectation } = handlers;
  if (unmetExpectation !== undefined) {
    server.on('checkExpectation', (req: IncomingMessage, res: ServerResponse) => {
      if (admitted(req, res)) unmetExpectation(req, res);
    });
  }
  server.maxConnections = policy.maxConnections;
  server.on('drop', () => hooks.onRefused('connections'));
  server.on('clientError', (err: NodeJS.ErrnoException, socket: Duplex) => answerClientError(err, socket, hooks));
  if (policy.idleTimeoutMs > 0) {
    server.setTimeout(policy.idleTimeoutMs);
    // With a listener here Node leaves the socket to it: one with a request in flight is cut and counted, an idle
    // keep-alive one just closed.
    server.on('timeout', (socket: Duplex) => {
      if (socket instanceof PacedConnection && socket.requestInFlight) hooks.onRefused('idle');
      socket.destroy();
    });
  }
  paceConnections(server, policy, hooks);
  return server;
}

/** The gate every request passes: false for one pipelined behind the request in flight (never handled). */
function admitted(req: IncomingMessage, res: ServerResponse): boolean {
  return req.socket instanceof PacedConnection ? req.socket.begin(req, res) : true;
}

/**
 * Node's HTTP server serves each connection from its 'connection' listener; the raw socket is taken from it here,
 * checked against the caps, and handed back as a PacedConnection (a Duplex, which the server's documented
 * 'connection' event takes).
 */
function paceConnections(server: Server, policy: ConnectionPolicy, hooks: PolicyHooks): void {
  const nodeListeners = server.listeners('connection') as Array<(socket: Duplex) => void>;
  const [serveConnection] = nodeListeners;
  if (nodeListeners.length !== 1 || serveConnection === undefined) {
    throw new Error('the HTTP server has no single connection listener to pace');
  }
  server.removeListener('connection', serveConnection);
  const limits = { maxHeaderBytes: policy.maxHeaderBytes, maxWaitingBytes: MAX_WAITING_BYTES };
  const onPipelined = () => hooks.onRefused('pipelined');
  const perSource = new Map<string, number>();
  server.on('connection', (socket: Socket | PacedConnection) => {
    if (socket instanceof PacedConnection) {
      serveConnection.call(server, socket);
      return;
    }
    const source = socket.remoteAddress ?? 'unknown';
    const open = (perSource.get(source) ?? 0) + 1;
    perSource.set(source, open);
    socket.once('close', () => {
      const left = (perSource.get(source) ?? 1) - 1;
      if (left === 0) perSource.delete(source);
      else perSource.set(source, left);
    });
    if (open > policy.maxConnectionsPerSource) {
      hooks.onRefused('per_source');
      socket.destroy();
      return;
    }
    hooks.onAccepted?.(socket);
    server.emit('connection', new PacedConnection(socket, limits, onPipelined));
  });
}

/**
 * A request Node could not parse, or that ran past a deadline: answered as Node would (408, 431, 400, Connection:
 * close) unless an answer has begun, then closed, and counted. A client that reset the connection is not counted.
 * A client that half-closed mid-body (HPE_INVALID_EOF_STATE) is answered by the request's listener, with its own
 * code (inbound/body.ts), unless that answer has begun.
 */
function answerClientError(err: NodeJS.ErrnoException, socket: Duplex, hooks: PolicyHooks): void {
  if (err.code === 'ECONNRESET' || err.code === 'EPIPE') {
    socket.destroy();
    return;
  }
  if (err.code === 'HPE_INVALID_EOF_STATE' && socket instanceof PacedConnection && socket.answersBodyCutShort()) return;
  const { reason, status } = refusalOf(err.code);
  hooks.onRefused(reason);
  const answerStarted = socket instanceof PacedConnection && socket.answerStarted;
  if (socket.writable && !answerStarted) {
    socket.write(`HTTP/1.1 ${status} ${STATUS_CODES[status] ?? ''}\r\nConnection: close\r\n\r\n`);
  }
  socket.destroy();
}

function refusalOf(code: string | undefined): { readonly reason: ConnectionRefusal; readonly status: number } {
  switch (code) {
    case 'HPE_HEADER_OVERFLOW':
      return { reason: 'headers_too_large', status: 431 };
    case 'ERR_HTTP_REQUEST_TIMEOUT':
      return { reason: 'timeout', status: 408 };
    case 'HPE_CHUNK_EXTENSIONS_OVERFLOW':
      return { reason: 'malformed', status: 413 };
    default:
      return { reason: 'malformed', status: 400 };
  }
}
