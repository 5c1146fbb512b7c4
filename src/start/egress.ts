// The egress subsystem at start: the listener internal callers send to, and the handler that signs and forwards each
// request (docs/operations.md). Not listening until listen().
import type { Server } from 'node:http';
import type { Config } from '../config/config.js';
import { createCallerCheck } from '../egress/caller-check.js';
import { exchangeEvents } from '../egress/exchange-events.js';
import { createEgressHandler } from '../egress/handler.js';
import { requestDeadlineMs } from '../egress/request-deadline.js';
import { requestSigning } from '../egress/request-signing.js';
import type { EgressRequest } from '../egress/request.js';
import { createRouter } from '../egress/routes.js';
import { keeperFromConfig } from '../idempotency/from-config.js';
import type { LimitGuard } from '../limits/guard.js';
import { BodyBudget } from '../inbound/body-budget.js';
import { createPolicyServer, type ConnectionPolicy } from '../inbound/connection-policy.js';
import { InFlightRequests } from '../inbound/in-flight.js';
import { closeServer, listen } from '../inbound/listener.js';
import { EGRESS_FREE_BODY_BYTES } from '../memory/budget.js';
import type { Logger } from '../observability/log.js';
import type { SidecarMetrics } from '../observability/metrics.js';
import type { Tracing } from '../observability/tracing.js';
import type { ClockCorrection } from '../signing/clock-correction.js';
import type { Signer } from '../signing/signer.js';
import type { StateStore } from '../state/state-store.js';
import type { TokenManager } from '../token/token-manager.js';
import type { GatewayClient } from '../upstream/gateway-client.js';

/**
 * The egress listener serves local callers only (docs/operations.md, "Connections"). A caller gets 10 s to send its
 * headers and 60 s for the whole request (a body trickling in slower is cut); an idle keep-alive connection is
 * closed after 5 s. The answer itself may take as long as the gateway does (SIDECAR_UPSTREAM_RESPONSE_TIMEOUT_MS):
 * no idle cut applies to it here. More open connections than a pod's services need are refused rather than piling
 * up; every caller comes from the pod's own address, so the one source may hold them all.
 */
const EGRESS_CONNECTIONS: ConnectionPolicy = {
  maxConnections: 1_024,
  maxConnectionsPerSource: 1_024,
  // Node's default header limit.
  maxHeaderBytes: 16 * 1024,
  headersTimeoutMs: 10_000,
  requestTimeoutMs: 60_000,
  keepAliveTimeoutMs: 5_000,
  idleTimeoutMs: 0,
  // How often Node checks the two timeouts above (its default, 30 s, would let a stalled caller hold on 40 s).
  checkIntervalMs: 1_000,
};

export interface Egress {
  readonly server: Server;
  /** The requests in flight: their answers, and their handling, which goes on after shutdown answered them. */
  readonly tracker: InFlightRequests<EgressRequest>;
  /** Listens on SIDECAR_LISTEN_HOST:SIDECAR_LISTEN_PORT; resolves with the listener's URL. */
  listen(): Promise<string>;
  /** Startup has finished: the listener has accepted connections once (it stays true). */
  readonly started: () => boolean;
  /** The listener accepts connections and no shutdown has begun. */
  readonly serving: () => boolean;
  /** Shutdown's first step: no longer serving, and every answer asks its client to close the connection. */
  readonly beginDraining: () => void;
  /** A start that fails: closes the listener and every connection it holds. */
  close(): Promise<void>;
}

export function createEgress(
  config: Config,
  deps: {
    readonly signer: Signer;
    readonly clock: ClockCorrection;
    readonly tokens: TokenManager;
    readonly gatewayClient: GatewayClient;
    readonly store: StateStore;
    /** The money limits, when SIDECAR_LIMITS_FILE is set (start/limits.ts). */
    readonly limits: LimitGuard | undefined;
    readonly metrics: SidecarMetrics;
    readonly log: Logger;
    readonly tracing: Tracing;
    readonly now: () => number;
    /** True past the memory high-water mark (memory/pressure.ts): new requests are refused 503. */
    readonly overloaded: () => boolean;
  },
): Egress {
  const { signer, clock, tokens, gatewayClient, metrics, log, tracing, now } = deps;
  const tracker = new InFlightRequests<EgressRequest>();
  // From shutdown's first step on: readiness is false and every answer asks its client to close the connection.
  let draining = false;
  // From the token wait the manager really has and the connection settings: the longest a request's work may take.
  const requestDeadline = requestDeadlineMs({ ...config.upstream, tokenWaitMs: tokens.waitForTokenMs });
  const handle = createEgressHandler({
    gateway: {
      tokens,
      gatewayClient,
      sign: requestSigning({
        base: config.base,
        signer,
        clock,
        metrics,
        now,
        tracing,
        propagateUpstream: config.tracing.propagateUpstream,
      }),
      events: exchangeEvents({ metrics, tracing, clock, now }),
      connectRetryDeadlineMs: config.upstream.connectRetryDeadlineMs,
    },
    metrics,
    log,
    route: createRouter(config.signedRoutes),
    maxBodyBytes: config.maxBodyBytes,
    checkCaller: createCallerCheck({ listenHost: config.listen.host, allowedHosts: config.listen.allowedHosts }),
    forwardedRequestHeaders: new Set(config.forwardedRequestHeaders),
    bodyBudget: new BodyBudget({ freeBytes: EGRESS_FREE_BODY_BYTES, poolBytes: config.memory.egressBodyPoolBytes }),
    answerCorrelationFields: config.upstream.answerCorrelationFields,
    idempotency: {
      keeper: keeperFromConfig(config, requestDeadline, deps.store, log, now),
      required: config.idempotency.required,
    },
    limits: deps.limits,
    requestDeadlineMs: requestDeadline,
    draining: () => draining,
    overloaded: deps.overloaded,
    tracing,
  });
  const server = createPolicyServer(
    EGRESS_CONNECTIONS,
    { onRefused: (reason) => metrics.memory.connectionRefused('egress', reason) },
    {
      request: (req, res) => tracker.track(handle(req, res)),
      // Refused like any other request (logged, counted, with its code), rather than with Node's bare 417.
      unmetExpectation: (req, res) => tracker.track(handle(req, res, 'unmet')),
    },
  );
  let started = false;
  const isStarted = () => (started ||= server.listening);
  return {
    server,
    tracker,
    listen: () => listen(server, config.listen.host, config.listen.port),
    started: isStarted,
    serving: () => isStarted() && server.listening && !draining,
    beginDraining: () => {
      draining = true;
    },
    async close() {
      const closed = closeServer(server);
      server.closeAllConnections();
      await closed;
    },
  };
}
