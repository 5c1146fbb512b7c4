import { isIP } from 'node:net';
import { createSecureContext } from 'node:tls';
import type { BaseAddress } from '../config/base-url.js';
import { Exchange, GatewayConnection, type ConnectionOwner, type GatewayTarget } from './gateway-connection.js';
import {
  DEFAULT_KEEP_ALIVE_MS,
  DEFAULT_MAX_RESPONSE_BYTES,
  forwarderClosed,
  KEEP_ALIVE_HINT_MARGIN_MS,
  poolTimeout,
  type Forwarder,
  type ForwarderOptions,
  type SendOutcome,
  type UpstreamRequest,
} from './outcome.js';
import { requestText } from './request-text.js';
import { trustedCas } from './trusted-cas.js';

// Node's HTTP server allows 16 KiB of head; a gateway behind a load balancer may add a few cookies to that.
const MAX_HEAD_BYTES = 64 * 1024;

/**
 * A keep-alive pool of HTTP/1.1 connections to the one configured origin; nothing else is reachable through it.
 * Requests wait in order for a free connection once `connections` are open. An idle connection is reused, newest
 * first, only while it is younger than the keep-alive timeout, so a request is not written to a socket the gateway
 * is about to close for idleness (that request would end as outcome_unknown).
 */
export class GatewayPool implements Forwarder, ConnectionOwner {
  private readonly target: GatewayTarget;
  private readonly all = new Set<GatewayConnection>();
  private readonly idle: GatewayConnection[] = [];
  private readonly waiting: Exchange[] = [];
  private readonly keepAliveMs: number;
  private readonly sweeper: NodeJS.Timeout;
  private closing = false;
  /** Connections that answered and are about to be offered again (see GatewayConnection.finish). */
  private cooling = 0;
  /** Callers of close() and destroy() waiting for the last connection to go (either may be called twice). */
  private readonly drained: (() => void)[] = [];

  constructor(
    base: BaseAddress,
    private readonly options: ForwarderOptions,
  ) {
    const url = new URL(base.origin);
    const tls = base.protocol === 'https:';
    const host = base.hostname.startsWith('[') ? base.hostname.slice(1, -1) : base.hostname;
    this.target = {
      host,
      port: url.port === '' ? (tls ? 443 : 80) : Number(url.port),
      hostHeader: url.host,
      tls,
      servername: isIP(host) === 0 ? host : undefined,
      // Without `ca`, Node's default roots (and NODE_EXTRA_CA_CERTS) are trusted, as for any TLS client.
      secureContext: tls ? createSecureContext(options.ca === undefined ? {} : { ca: trustedCas(options.ca) }) : undefined,
      tlsSession: { ticket: undefined },
      connectTimeoutMs: options.connectTimeoutMs,
      responseTimeoutMs: options.responseTimeoutMs,
      limits: { maxHeadBytes: MAX_HEAD_BYTES, maxBodyBytes: options.maxResponseBytes ?? DEFAULT_MAX_RESPONSE_BYTES },
    };
    this.keepAliveMs = options.keepAliveTimeoutMs ?? DEFAULT_KEEP_ALIVE_MS;
    // One timer for every idle socket rather than one per request; reuse itself checks the exact deadline.
    this.sweeper = setInterval(() => this.closeExpired(), Math.min(this.keepAliveMs, 1_000)).unref();
  }

  send(request: UpstreamRequest): Promise<SendOutcome> {
    let text: string | Buffer;
    try {
      text = requestText(this.target.hostHeader, request);
    } catch (error) {
      return Promise.resolve({ kind: 'not_sent', error: error as Error, transient: false });
    }
    if (this.closing) return Promise.resolve({ kind: 'not_sent', error: forwarderClosed('the forwarder is closing'), transient: false });
    return new Promise<SendOutcome>((resolve) => this.assign(new Exchange(text, resolve)));
  }

  close(): Promise<void> {
    return this.stop(false);
  }

  destroy(): Promise<void> {
    return this.stop(true);
  }

  /** Refuses new requests; `abort` also ends the waiting and in-flight ones. Settles once no connection is left. */
  private stop(abort: boolean): Promise<void> {
    this.closing = true;
    clearInterval(this.sweeper);
    return new Promise<void>((resolve) => {
      this.drained.push(resolve);
      if (abort) {
        for (const exchange of this.waiting.splice(0)) {
          exchange.settle({ kind: 'not_sent', error: forwarderClosed('the forwarder was destroyed'), transient: false });
        }
        for (const connection of this.all) connection.abort(forwarderClosed('the forwarder was destroyed'));
      }
      this.closeIfDrained();
    });
  }

  coolingStarted(): void {
    this.cooling++;
  }

  coolingEnded(): void {
    this.cooling--;
  }

  reusable(connection: GatewayConnection, keepAliveHintSeconds: number | undefined): void {
    const next = this.dequeue();
    if (next !== undefined) return connection.start(next);
    const hintMs = keepAliveHintSeconds === undefined ? Infinity : keepAliveHintSeconds * 1000 - KEEP_ALIVE_HINT_MARGIN_MS;
    const keepMs = Math.min(this.keepAliveMs, hintMs);
    if (keepMs <= 0 || this.closing) {
      connection.abort(forwarderClosed('idle connection not kept'));
      return;
    }
    connection.idleUntil = performance.now() + keepMs;
    this.idle.push(connection);
  }

  closed(connection: GatewayConnection): void {
    this.all.delete(connection);
    const at = this.idle.indexOf(connection);
    if (at >= 0) this.idle.splice(at, 1);
    // The slot is free again: a waiting request gets a new connection.
    const next = this.dequeue();
    if (next !== undefined) this.open(next);
    this.closeIfDrained();
  }

  private assign(exchange: Exchange): void {
    const now = performance.now();
    for (let connection = this.idle.pop(); connection !== undefined; connection = this.idle.pop()) {
      if (connection.idleUntil > now && connection.usable) return connection.start(exchange);
      connection.abort(forwarderClosed('idle connection expired'));
    }
    // A connection that has just answered is free again in two turns of the event loop: waiting for it beats a
    // new handshake, and a caller sending one request after another keeps one connection.
    if (this.all.size < this.options.connections && this.waiting.length >= this.cooling) return this.open(exchange);
    // Waiting for a connection counts as connecting. A request that waited past connectTimeoutMs was never
    // written, so it fails as not_sent and the retry loop signs it afresh, rather than leaving with an old
    // X-Timestamp that the gateway's clock window may already have closed on.
    exchange.timer = setTimeout(() => this.giveUpWaiting(exchange), this.options.connectTimeoutMs);
    this.waiting.push(exchange);
  }

  private dequeue(): Exchange | undefined {
    const next = this.waiting.shift();
    if (next !== undefined) clearTimeout(next.timer);
    return next;
  }

  private giveUpWaiting(exchange: Exchange): void {
    const at = this.waiting.indexOf(exchange);
    if (at < 0) return;
    this.waiting.splice(at, 1);
    exchange.settle({ kind: 'not_sent', error: poolTimeout(), transient: true });
    this.closeIfDrained();
  }

  private open(exchange: Exchange): void {
    this.all.add(new GatewayConnection(this.target, this, exchange));
  }

  private closeExpired(): void {
    const now = performance.now();
    for (const connection of this.idle) if (connection.idleUntil <= now) connection.abort(forwarderClosed('idle connection expired'));
  }

  /** Once closing, idle connections are ended; the promise settles when none is left. */
  private closeIfDrained(): void {
    if (!this.closing || this.drained.length === 0) return;
    if (this.waiting.length > 0) return;
    for (const connection of this.idle) connection.abort(forwarderClosed('the forwarder is closing'));
    if (this.all.size === 0) for (const resolve of this.drained.splice(0)) resolve();
  }
}
