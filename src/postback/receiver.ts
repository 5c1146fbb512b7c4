// The receiver's own listener (docs/postbacks.md), apart from the egress one: a slow or hostile sender on the public side
// can hold at most this server's connections, never the egress listener's or the gateway client's. It only receives:
// what becomes of a verified postback is the delivery's (delivery.ts), whose sink it is given.
import type { Server } from 'node:http';
import type { KeyObject } from 'node:crypto';
import type { Socket } from 'node:net';
import { nonceTtlSeconds, type PostbackConfig, type PostbackSourceAllowList } from '../config/postback-settings.js';
import { answerUnmetExpectation } from '../inbound/answer.js';
import { BodyBudget } from '../inbound/body-budget.js';
import { createPolicyServer, type ConnectionPolicy, type ConnectionRefusal } from '../inbound/connection-policy.js';
import { InFlightRequests } from '../inbound/in-flight.js';
import { listen } from '../inbound/listener.js';
import { POSTBACK_FREE_BODY_BYTES } from '../memory/budget.js';
import type { Logger } from '../observability/log.js';
import type { PostbackMetrics } from '../observability/postback-metrics.js';
import type { Tracing } from '../observability/tracing.js';
import type { StateStore } from '../state/state-store.js';
import { createPostbackHandler, sourceAllowed } from './handler.js';
import { signedPostbackUrl } from './public-url.js';
import { ReplayMemory } from './replay-memory.js';
import type { PostbackSink } from './sink.js';
import { createPostbackVerifier } from './verify-postback.js';

/**
 * The receiver's connection policy (docs/operations.md, "Connections"): a sender gets 10 s for its headers and 15 s
 * for the whole request (the body deadline: a body trickling in is cut with 408); an idle keep-alive connection is
 * closed after 5 s. The answer may take up to the delivery timeout (SIDECAR_POSTBACK_FORWARD_TIMEOUT_MS): no idle cut
 * applies to it here. Through an ingress every postback comes from the ingress's address, so one source may hold all
 * of SIDECAR_POSTBACK_MAX_CONNECTIONS.
 */
function receiverConnections(config: PostbackConfig, deps: PostbackReceiverDeps): ConnectionPolicy {
  return {
    maxConnections: config.maxConnections,
    maxConnectionsPerSource: config.maxConnections,
    maxHeaderBytes: 16_384,
    headersTimeoutMs: deps.listener?.headersTimeout ?? 10_000,
    requestTimeoutMs: deps.listener?.requestTimeout ?? 15_000,
    keepAliveTimeoutMs: 5_000,
    idleTimeoutMs: 0,
    checkIntervalMs: 1_000,
  };
}

/**
 * A connection from outside SIDECAR_POSTBACK_ALLOW_CIDRS gets this long, from its connect, to send a request and
 * read its 403 (which closes it). Without it a refused source could hold every one of the receiver's connections
 * for the whole header deadline, again and again, and the gateway's postbacks would find none free.
 */
const REFUSED_SOURCE_MS = 1_000;

/** After the abort, the time the aborted postbacks get to write their 503 before their connections go. */
const ABORTED_ANSWER_MS = 1_000;

export interface PostbackReceiverDeps {
  readonly store: StateStore;
  readonly metrics: PostbackMetrics;
  readonly log: Logger;
  readonly nowMs?: () => number;
  /** The state store's command timeout (SIDECAR_REDIS_COMMAND_TIMEOUT_MS; 0 for the memory store). */
  readonly storeCommandTimeoutMs?: number;
  /** A span per postback received (docs/operations.md#tracing); the sink traces its delivery under it. */
  readonly tracing?: Tracing;
  /** Continue a sender's traceparent (SIDECAR_TRACE_PROPAGATE_UPSTREAM); otherwise each postback starts a trace. */
  readonly continueSenderTrace?: boolean;
  /** Where verified postbacks go: the sink of the delivery the settings chose (delivery.ts). */
  readonly sink: PostbackSink;
  /**
   * The bytes of large bodies held at once beyond POSTBACK_FREE_BODY_BYTES: the memory budget's postback share. A
   * genuine postback is a few hundred bytes; larger ones that do not fit are answered 503 (redelivered).
   */
  readonly bodyPoolBytes: number;
  /** True past the memory high-water mark (memory/pressure.ts): postbacks are answered 503 (redelivered). */
  readonly overloaded?: () => boolean;
  /** A postback answered 503 because of it. */
  readonly onShed?: () => void;
  /** A connection or request the connection policy refused. */
  readonly onRefused?: (reason: ConnectionRefusal) => void;
  /** Test hook: shorter sender timeouts than RECEIVER_LISTENER's. */
  readonly listener?: { readonly headersTimeout?: number; readonly requestTimeout?: number };
}

export interface PostbackReceiver {
  readonly server: Server;
  /** Installs the keys of a rotated SIDECAR_POSTBACK_PUBLIC_KEY_FILE: the next postback is verified with them. */
  replaceKeys(keys: readonly KeyObject[]): void;
  /** Listens on the configured host and port; resolves with the local URL. */
  start(): Promise<string>;
  /**
   * Stops accepting, lets postbacks in flight finish up to `maxMs`, answers the rest 503 (redelivered): the sink's
   * deliveries still waiting are aborted. Resolves once every connection is closed.
   */
  close(maxMs: number): Promise<void>;
}

export function createPostbackReceiver(config: PostbackConfig, deps: PostbackReceiverDeps): PostbackReceiver {
  // Aborted once the receiver stops waiting for its open answers: the deliveries they wait for give up.
  const stopping = new AbortController();
  let keys = config.publicKeys;
  const handle = createPostbackHandler({
    path: config.publicUrl.path,
    allow: config.allowCidrs,
    verify: createPostbackVerifier({
      ...config,
      publicKeys: () => keys,
      signedUrl: signedPostbackUrl(config.publicUrl),
    }),
    memory: new ReplayMemory(deps.store, {
      nonceTtlMs: nonceTtlSeconds(config) * 1000,
      deliveredTtlMs: config.deliveredTtlSeconds * 1000,
      deliveryTimeoutMs: config.forwardTimeoutMs,
      storeCommandTimeoutMs: deps.storeCommandTimeoutMs ?? 0,
    }),
    sink: deps.sink,
    stopping: stopping.signal,
    budget: new BodyBudget({ freeBytes: POSTBACK_FREE_BODY_BYTES, poolBytes: deps.bodyPoolBytes }),
    overloaded: deps.overloaded ?? (() => false),
    onShed: deps.onShed ?? (() => undefined),
    metrics: deps.metrics,
    log: deps.log,
    nowMs: deps.nowMs ?? Date.now,
    ...(deps.tracing === undefined ? {} : { tracing: deps.tracing }),
    continueSenderTrace: deps.continueSenderTrace === true,
  });
  // The postbacks whose answers are still open, so that close() waits for the work rather than guessing.
  const inFlight = new InFlightRequests();
  const server = createPolicyServer(
    receiverConnections(config, deps),
    {
      onRefused: deps.onRefused ?? (() => undefined),
      onAccepted: (socket) => limitRefusedSource(socket, config.allowCidrs),
    },
    {
      request: (req, res) => {
        if (!server.listening) res.setHeader('connection', 'close');
        const done = handle(req, res);
        inFlight.track({
          onClose: (listener) => res.once('close', listener),
          done,
          get isAnswered() {
            return res.headersSent;
          },
        });
      },
      unmetExpectation: answerUnmetExpectation,
    },
  );
  return {
    server,
    replaceKeys: (next) => {
      keys = next;
    },
    start: () => listen(server, config.listen.host, config.listen.port),
    async close(maxMs) {
      const closed = new Promise<void>((resolve) => server.close(() => resolve()));
      server.closeIdleConnections();
      await inFlight.waitIdle(maxMs);
      // Deliveries still waiting are aborted: each is answered 503 and its claim released, so it is redelivered.
      stopping.abort();
      await inFlight.waitIdle(ABORTED_ANSWER_MS);
      server.closeAllConnections();
      await closed;
    },
  };
}

/** Closes a connection from a source the allow-list refuses REFUSED_SOURCE_MS after its connect, answered or not. */
function limitRefusedSource(socket: Socket, allow: PostbackSourceAllowList | undefined): void {
  if (sourceAllowed(allow, socket.remoteAddress)) return;
  const deadline = setTimeout(() => socket.destroy(), REFUSED_SOURCE_MS);
  socket.once('close', () => clearTimeout(deadline));
}
