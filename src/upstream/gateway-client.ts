import { buildConnector, Client } from 'undici';
import type { BaseAddress } from '../config/base-url.js';
import type { Secret } from '../config/secret.js';
import { trustedCas } from '../config/trusted-cas.js';
import { DeadlineList } from '../deadline-list.js';
import { NO_TRACING, type Tracing } from '../observability/tracing.js';
import { ConnectionLender } from './connection-lender.js';
import type { UpstreamResponse } from './gateway-answer.js';
import {
  MAX_HEAD_BYTES,
  notSent,
  sentNoAnswer,
  type GatewayClient,
  type GatewayClientOptions,
  type SendFailure,
  type SendOutcome,
  type UpstreamRequest,
} from './gateway-send.js';
import { InterimContinueFilter } from './interim-continue.js';
import { SendHandler } from './send-handler.js';
import { forwardProxyConnector, type ForwardProxyRoute } from './forward-proxy-tunnel.js';
import { errorCode } from './upstream-errors.js';

export type { UpstreamResponse } from './gateway-answer.js';
export type {
  GatewayClient,
  GatewayClientOptions,
  RequestEnd,
  SendFailure,
  SendOutcome,
  UpstreamRequest,
} from './gateway-send.js';
export { endOf } from './gateway-send.js';
export { causeFamily, errorCode, proxyStatus, UpstreamError, upstreamErrors } from './upstream-errors.js';

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
export function createGatewayClient(
  base: BaseAddress,
  options: GatewayClientOptions,
  hooks: GatewayClientHooks = {},
): RotatableGatewayClient {
  const maxBytes = options.maxResponseBytes ?? DEFAULT_MAX_RESPONSE_BYTES;
  const responseTimeouts = new DeadlineList(options.responseTimeoutMs);
  let current = options;
  const lender = new ConnectionLender(options.connections, options.connectTimeoutMs, () =>
    newClient(base, current, () => current.proxy),
  );

  const tracing = hooks.tracing ?? NO_TRACING;
  const report = (outcome: SendOutcome): SendOutcome => {
    if (outcome.kind === 'response') hooks.onAnswer?.(outcome.response);
    else hooks.onFailure?.(outcome);
    return outcome;
  };
  const send = async (request: UpstreamRequest): Promise<SendOutcome> => {
    const wait =
      request.trace !== undefined && !lender.lendsNow()
        ? tracing.startSpan('wait for a gateway connection', 'internal', request.trace)
        : undefined;
    const lease = await lender.acquire(request.end);
    if (wait !== undefined) {
      wait.setAttributes({ 'sidecar.connection.lent': lease.kind === 'lent' });
      if (lease.kind === 'refused') wait.fail(errorCode(lease.error));
      wait.end();
    }
    if (lease.kind === 'refused') return report(notSent(lease.error, lease.transient));
    if (request.beforeWrite !== undefined) {
      try {
        await request.beforeWrite();
      } catch (refusal) {
        // Refused before its first byte: the connection carried nothing of it and goes back as it was.
        lender.release(lease.client, true);
        throw refusal;
      }
    }
    let outcome = await dispatch(lease.client, request, responseTimeouts, maxBytes);
    const mismatch = outcome.kind === 'response' ? request.checkAnswer?.(outcome.response) : undefined;
    if (mismatch !== undefined) outcome = sentNoAnswer(mismatch, false);
    // A connection that failed mid-exchange is already gone in undici; one that delivered a stray answer is
    // destroyed here, since the answer really meant for this request may still be on its way over it.
    lender.release(lease.client, mismatch === undefined);
    return report(outcome);
  };
  const replaceCa = (ca: string | undefined): void => {
    current = { ...current, ca };
    lender.renew();
  };
  // Tunnels already up stay: the proxy checked their credentials when they opened. Connections read the proxy
  // settings at each CONNECT, so the next tunnel uses the new password without closing anything.
  const replaceProxy = (change: Partial<ForwardProxyRoute>): void => {
    if (current.proxy !== undefined) current = { ...current, proxy: { ...current.proxy, ...change } };
  };
  return {
    send,
    close: () => lender.close(),
    destroy: () => lender.destroy(),
    replaceCa,
    replaceProxyPassword: (password) => replaceProxy({ password }),
    replaceProxyCa: (ca) => replaceProxy({ ca }),
  };
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
