import { buildConnector, Client } from 'undici';
import type { BaseAddress } from '../config/base-url.js';
import type { Secret } from '../config/secret.js';
import { trustedCas } from './trusted-cas.js';
import { DeadlineList } from '../time/deadline-list.js';
import { NO_TRACING, type Tracing } from '../observability/tracing.js';
import { ConnectionLender } from './connection-lender.js';
import type { UpstreamResponse } from './gateway-answer.js';
import {
  MAX_HEAD_BYTES,
  notSent,
  sentNoAnswer,
  type SendFailure,
  type SendOutcome,
  type UpstreamRequest,
} from './gateway-send.js';
import { InterimContinueFilter } from './interim-continue.js';
import { SendHandler } from './send-handler.js';
import { forwardProxyConnector, type ForwardProxyRoute } from './forward-proxy-tunnel.js';
import { errorCode } from './upstream-errors.js';

export interface GatewayClientOptions {
  readonly ca: string | undefined;
  /** The forward proxy every connection tunnels through (forward-proxy-tunnel.ts); undefined: straight to the gateway. */
  readonly proxy?: ForwardProxyRoute | undefined;
  readonly connectTimeoutMs: number;
  readonly responseTimeoutMs: number;
  readonly connections: number;
  readonly keepAliveTimeoutMs?: number;
  /** Gateway answers are small JSON; a cap keeps a misbehaving upstream from exhausting memory. */
  readonly maxResponseBytes?: number;
}

export interface GatewayClient {
  send(request: UpstreamRequest): Promise<SendOutcome>;
  /** Waits for requests in flight, then closes. */
  close(): Promise<void>;
  /** Aborts requests in flight (sent_no_answer; those not yet written get not_sent) and closes. */
  destroy(): Promise<void>;
}

const DEFAULT_MAX_RESPONSE_BYTES = 8 * 1024 * 1024;
const DEFAULT_KEEP_ALIVE_MS = 4_000;
/** A Keep-Alive hint is the gateway's own idle timeout: a socket is not reused this close to its end. */
const KEEP_ALIVE_HINT_MARGIN_MS = 1_000;

/** What the gateway client reports of every send, whoever made it (a payment, a token grant). */
export interface GatewayClientHooks {
  /** Every gateway answer that belongs to its request: the gateway clock's measurement. */
  readonly onAnswer?: (response: UpstreamResponse) => void;
  /** Every send that got no answer: counted by the hop that failed (`failure.hop`). */
  readonly onFailure?: (failure: SendFailure) => void;
  /** A request that has to wait for a free connection gets a span for the wait. */
  readonly tracing?: Tracing;
}

/** A GatewayClient whose trusted CA bundle can be replaced (SIDECAR_UPSTREAM_CA_FILE rotation). */
export interface RotatableGatewayClient extends GatewayClient {
  /**
   * New connections trust `ca` (plus the system roots); idle connections are closed at once and busy ones when
   * their request is done, so no request in flight is cut and none is sent over a connection of the old trust.
   */
  replaceCa(ca: string | undefined): void;
  /** The forward proxy's password for the next CONNECT (SIDECAR_UPSTREAM_PROXY_PASSWORD_FILE rotation). */
  replaceProxyPassword(password: Secret): void;
  /** The CAs trusted for an https:// proxy, from the next connection on (SIDECAR_UPSTREAM_PROXY_CA_FILE rotation). */
  replaceProxyCa(ca: string | undefined): void;
}

/**
 * The one HTTP client to the gateway: undici, one connection per Client, to the one configured origin (nothing
 * else is reachable through it). undici parses every answer; the sidecar decides only what the money-safe retry
 * rules need: whether a failure came before any byte left, and whether an answer belongs to its request.
 */
export class UndiciGatewayClient implements RotatableGatewayClient {
  private readonly maxBytes: number;
  private readonly responseTimeouts: DeadlineList;
  /** The settings new connections are made with: the CA and the forward proxy's password and CA change. */
  private current: GatewayClientOptions;
  private readonly lender: ConnectionLender;
  private readonly tracing: Tracing;

  constructor(
    base: BaseAddress,
    options: GatewayClientOptions,
    private readonly hooks: GatewayClientHooks = {},
  ) {
    this.maxBytes = options.maxResponseBytes ?? DEFAULT_MAX_RESPONSE_BYTES;
    this.responseTimeouts = new DeadlineList(options.responseTimeoutMs);
    this.current = options;
    this.lender = new ConnectionLender(options.connections, options.connectTimeoutMs, () =>
      newClient(base, this.current, () => this.current.proxy),
    );
    this.tracing = hooks.tracing ?? NO_TRACING;
  }

  async send(request: UpstreamRequest): Promise<SendOutcome> {
    const { lender } = this;
    const wait =
      request.trace !== undefined && !lender.lendsNow()
        ? this.tracing.startSpan('wait for a gateway connection', 'internal', request.trace)
        : undefined;
    const lease = await lender.acquire(request.end);
    if (wait !== undefined) {
      wait.setAttributes({ 'sidecar.connection.lent': lease.kind === 'lent' });
      if (lease.kind === 'refused') wait.fail(errorCode(lease.error));
      wait.end();
    }
    if (lease.kind === 'refused') return this.report(notSent(lease.error, lease.transient));
    if (request.beforeWrite !== undefined) {
      try {
        await request.beforeWrite();
      } catch (refusal) {
        // Refused before its first byte: the connection carried nothing of it and goes back as it was.
        lender.release(lease.client, true);
        throw refusal;
      }
    }
    let outcome = await dispatch(lease.client, request, this.responseTimeouts, this.maxBytes);
    const mismatch = outcome.kind === 'response' ? request.checkAnswer?.(outcome.response) : undefined;
    if (mismatch !== undefined) outcome = sentNoAnswer(mismatch, false);
    // A connection that failed mid-exchange is already gone in undici; one that delivered a stray answer is
    // destroyed here, since the answer really meant for this request may still be on its way over it.
    lender.release(lease.client, mismatch === undefined);
    return this.report(outcome);
  }

  close(): Promise<void> {
    return this.lender.close();
  }

  destroy(): Promise<void> {
    return this.lender.destroy();
  }

  replaceCa(ca: string | undefined): void {
    this.current = { ...this.current, ca };
    this.lender.renew();
  }

  replaceProxyPassword(password: Secret): void {
    this.replaceProxy({ password });
  }

  replaceProxyCa(ca: string | undefined): void {
    this.replaceProxy({ ca });
  }

  // Tunnels already up stay: the proxy checked their credentials when they opened. Connections read the proxy
  // settings at each CONNECT, so the next tunnel uses the new password without closing anything.
  private replaceProxy(change: Partial<ForwardProxyRoute>): void {
    const { proxy } = this.current;
    if (proxy !== undefined) this.current = { ...this.current, proxy: { ...proxy, ...change } };
  }

  private report(outcome: SendOutcome): SendOutcome {
    if (outcome.kind === 'response') this.hooks.onAnswer?.(outcome.response);
    else this.hooks.onFailure?.(outcome);
    return outcome;
  }
}

function newClient(
  base: BaseAddress,
  options: GatewayClientOptions,
  proxy: () => ForwardProxyRoute | undefined,
): Client {
  const keepAliveMs = options.keepAliveTimeoutMs ?? DEFAULT_KEEP_ALIVE_MS;
  const ca = trustedCas(options.ca);
  const direct = buildConnector({ timeout: options.connectTimeoutMs, ...(ca === undefined ? {} : { ca }) });
  const route = proxy();
  // Whether to tunnel is settled at start; only the proxy's password and CA change while running.
  const connect =
    route === undefined ? direct : forwardProxyConnector(() => proxy() ?? route, direct, options.connectTimeoutMs);
  return new Client(base.origin, {
    pipelining: 1,
    connect: (connectOptions, callback) =>
      connect(connectOptions, (error, socket) => {
        if (error !== null) callback(error, null);
        else callback(null, new InterimContinueFilter(socket) as unknown as typeof socket);
      }),
    maxHeaderSize: MAX_HEAD_BYTES,
    // A request written to a socket that the gateway is closing for idleness ends as outcome_unknown: keeping
    // idle sockets for less time than the gateway does makes that race rare. undici takes a Keep-Alive hint
    // instead of keepAliveTimeout, capped by keepAliveMaxTimeout: both carry the setting.
    keepAliveTimeout: keepAliveMs,
    keepAliveMaxTimeout: keepAliveMs,
    keepAliveTimeoutThreshold: KEEP_ALIVE_HINT_MARGIN_MS,
    // One deadline for the whole answer, the SendHandler's own (from the first byte written): undici's per-phase
    // timers would race it with other codes.
    headersTimeout: 0,
    bodyTimeout: 0,
  });
}

function dispatch(
  client: Client,
  request: UpstreamRequest,
  timeouts: DeadlineList,
  maxBytes: number,
): Promise<SendOutcome> {
  return new Promise<SendOutcome>((resolve) => {
    const { path, headers, body, end } = request;
    client.dispatch(
      { method: 'POST', path, headers, body, idempotent: false },
      new SendHandler(resolve, timeouts, maxBytes, end),
    );
  });
}
