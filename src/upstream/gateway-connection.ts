import { connect as connectTcp, type Socket } from 'node:net';
import { connect as connectTls, type SecureContext } from 'node:tls';
import { isTimeout, isTransientConnectError, ResponseTimeoutError, UpstreamError, type SendOutcome } from './outcome.js';
import { ResponseParser, type ParserLimits } from './response-parser.js';

/** Where the one gateway origin lives, resolved once from the base address. */
export interface GatewayTarget {
  readonly host: string;
  readonly port: number;
  /** The Host header: the URL's host, with the port when it is not the scheme's default. */
  readonly hostHeader: string;
  readonly tls: boolean;
  /** SNI and certificate name; undefined for an IP address. */
  readonly servername: string | undefined;
  /** Built once: the system roots (plus the extra CA) are not parsed again for every connection. */
  readonly secureContext: SecureContext | undefined;
  /** The newest TLS session ticket, so a new connection resumes instead of a full handshake. */
  readonly tlsSession: { ticket: Buffer | undefined };
  readonly connectTimeoutMs: number;
  readonly responseTimeoutMs: number;
  readonly limits: ParserLimits;
}

/** What the pool hears from a connection. */
export interface ConnectionOwner {
  /** A response is complete; the socket will be offered again shortly (or close). */
  coolingStarted(): void;
  coolingEnded(): void;
  /** The socket may carry another request. */
  reusable(connection: GatewayConnection, keepAliveHintSeconds: number | undefined): void;
  /** The socket is gone (for any reason); the pool forgets it. */
  closed(connection: GatewayConnection): void;
}

/** One request waiting for, or travelling on, a connection. It settles exactly once. */
export class Exchange {
  connection: GatewayConnection | undefined;
  timer: NodeJS.Timeout | undefined;
  private settled = false;

  constructor(
    readonly text: string | Buffer,
    private readonly resolve: (outcome: SendOutcome) => void,
  ) {}

  settle(outcome: SendOutcome): void {
    if (this.settled) return;
    this.settled = true;
    clearTimeout(this.timer);
    this.resolve(outcome);
  }
}

function onResponseTimeout(exchange: Exchange): void {
  exchange.connection?.abort(new ResponseTimeoutError('gateway did not answer in time'));
}

// Two setImmediate turns, so the event loop polls the socket once more before it is offered again.
function afterFirstTurn(connection: GatewayConnection): void {
  setImmediate(afterSecondTurn, connection);
}

function afterSecondTurn(connection: GatewayConnection): void {
  connection.offer();
}

/**
 * One keep-alive socket to the gateway, carrying one request at a time (no pipelining, so each answer belongs to
 * the one request on the socket). It decides the one question retries depend on: a request that failed before
 * `write` was called never left; from `write` on, the gateway may have acted on it.
 */
export class GatewayConnection {
  /** performance.now() after which an idle connection must not be reused. */
  idleUntil = 0;
  private readonly socket: Socket;
  private connected = false;
  private exchange: Exchange | undefined;
  /** Set when the request is written, so a request with a parser may have reached the gateway. */
  private parser: ResponseParser | undefined;
  private failure: Error | undefined;
  private connectTimer: NodeJS.Timeout | undefined;
  private keepAliveHintSeconds: number | undefined;
  private cooling = false;

  constructor(
    private readonly target: GatewayTarget,
    private readonly owner: ConnectionOwner,
    first: Exchange,
  ) {
    this.exchange = first;
    first.connection = this;
    this.socket = target.tls
      ? connectTls({
          host: target.host,
          port: target.port,
          servername: target.servername,
          secureContext: target.secureContext,
          session: target.tlsSession.ticket,
          ALPNProtocols: ['http/1.1'],
        }).on('session', (ticket: Buffer) => (target.tlsSession.ticket = ticket))
      : connectTcp({ host: target.host, port: target.port });
    this.socket.setNoDelay(true);
    this.connectTimer = setTimeout(() => this.abort(new UpstreamError('ERR_GATEWAY_CONNECT_TIMEOUT', 'could not connect to the gateway in time')), target.connectTimeoutMs);
    this.socket.once(target.tls ? 'secureConnect' : 'connect', () => this.onConnected());
    this.socket.on('data', (chunk: Buffer) => this.onData(chunk));
    this.socket.on('end', () => this.onEnd());
    this.socket.on('error', (error: Error) => (this.failure ??= error));
    this.socket.once('close', () => this.onClose());
  }

  get usable(): boolean {
    return this.connected && !this.socket.destroyed && this.socket.writable;
  }

  /** Writes the exchange's request on this (connected, idle) socket. */
  start(exchange: Exchange): void {
    this.exchange = exchange;
    exchange.connection = this;
    this.write(exchange);
  }

  /** Hands the connection back to the pool if it is still sound and nothing is left to write on it. */
  offer(): void {
    if (!this.cooling) return;
    this.cooling = false;
    this.owner.coolingEnded();
    // An early answer (a 413 before the body was read) can leave request bytes unsent: such a socket is not reused.
    if (this.usable && this.socket.writableLength === 0) this.owner.reusable(this, this.keepAliveHintSeconds);
    else this.socket.destroy();
  }

  /** Ends the socket; a request on it is answered sent_no_answer (or not_sent if it was never written). */
  abort(reason: Error): void {
    this.failure ??= reason;
    this.socket.destroy();
  }

  private write(exchange: Exchange): void {
    this.parser = new ResponseParser(this.target.limits);
    exchange.timer = setTimeout(onResponseTimeout, this.target.responseTimeoutMs, exchange);
    this.socket.write(exchange.text);
  }

  private onConnected(): void {
    clearTimeout(this.connectTimer);
    this.connected = true;
    if (this.exchange !== undefined) this.write(this.exchange);
  }

  private onData(chunk: Buffer): void {
    const exchange = this.exchange;
    const parser = this.parser;
    if (exchange === undefined || parser === undefined) return this.abort(new UpstreamError('ERR_GATEWAY_UNSOLICITED_DATA', 'gateway sent bytes no request asked for'));
    let complete: boolean;
    try {
      complete = parser.push(chunk);
    } catch (error) {
      return this.abort(error as Error);
    }
    if (complete) this.finish(exchange, parser);
  }

  private onEnd(): void {
    const exchange = this.exchange;
    const parser = this.parser;
    // A body without a length ends with the connection; anything else cut short is left to onClose.
    if (exchange !== undefined && parser !== undefined && parser.endsWithClose && parser.end()) this.finish(exchange, parser);
  }

  private finish(exchange: Exchange, parser: ResponseParser): void {
    this.exchange = undefined;
    this.parser = undefined;
    exchange.connection = undefined;
    // Bytes after the answer mean the two sides disagree about framing: the socket is not trusted again.
    if (parser.keepAlive && parser.trailing === 0 && this.usable) {
      // Not reused at once: a FIN, a reset or a stray answer already sent by the gateway may not have been read
      // yet. Two turns of the event loop give the socket one more poll; any byte arriving meanwhile finds no
      // request on it and closes it (undici waits likewise). HTTP/1.1 cannot close this race, only narrow it.
      this.keepAliveHintSeconds = parser.keepAliveHintSeconds;
      this.cooling = true;
      this.owner.coolingStarted();
      setImmediate(afterFirstTurn, this);
    } else this.socket.destroy();
    exchange.settle({ kind: 'response', response: { status: parser.status, headers: parser.headers, body: parser.body() } });
  }

  private onClose(): void {
    clearTimeout(this.connectTimer);
    if (this.cooling) {
      this.cooling = false;
      this.owner.coolingEnded();
    }
    const exchange = this.exchange;
    this.exchange = undefined;
    this.owner.closed(this);
    if (exchange === undefined) return;
    exchange.connection = undefined;
    if (this.parser === undefined) {
      const error = this.failure ?? new UpstreamError('ERR_GATEWAY_CLOSED_CONNECTING', 'connection closed before the request was written');
      exchange.settle({ kind: 'not_sent', error, transient: isTransientConnectError(error) });
    } else {
      const error = this.failure ?? new UpstreamError('ERR_GATEWAY_CLOSED', 'gateway closed the connection before answering');
      exchange.settle({ kind: 'sent_no_answer', error, timedOut: isTimeout(error) });
    }
  }
}
