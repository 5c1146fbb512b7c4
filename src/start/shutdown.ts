import type { Server } from 'node:http';
import { setTimeout as sleep } from 'node:timers/promises';
import { sidecarErrors } from '../errors.js';
import type { InFlightRequests } from '../inbound/in-flight.js';
import { closeServer } from '../inbound/listener.js';
import type { Logger } from '../observability/log.js';
import type { Tracing } from '../observability/tracing.js';
import { errorSettlement, type EgressRequest } from '../egress/request.js';
import type { Postbacks } from './postbacks.js';
import type { StateStore } from '../state/state-store.js';
import type { TokenManager } from '../token/token-manager.js';
import type { GatewayClient } from '../upstream/gateway-client.js';

/**
 * How long shutdown waits, once the gateway connections are given up, for the requests it cut off to write their
 * idempotency records: a store command or two each (SIDECAR_REDIS_COMMAND_TIMEOUT_MS, 100 ms by default), so 2 s is
 * ample on a loaded pod, and short enough not to hold the exit up for a request stuck elsewhere. A record not
 * written by then stays in_progress: a retry gets 409, then outcome_unknown after the deadline, never a resend.
 */
const REQUESTS_SETTLE_MAX_MS = 2_000;
/** How long the exit waits for the last spans to reach the collector: one that is away must not hold the pod. */
const TRACES_FLUSH_MAX_MS = 2_000;

export interface ShutdownParts {
  /** The egress listener: it stops accepting once the drain delay is over. */
  readonly egress: Server;
  /** The admin listener (probes, metrics): closed last, once the store is. */
  readonly admin: Server;
  /** The egress requests: their answers, and their handling, which goes on after shutdown answered them. */
  readonly tracker: InFlightRequests<EgressRequest>;
  readonly tokens: TokenManager;
  readonly gatewayClient: GatewayClient;
  readonly store: StateStore;
  /** The postback receiver and its delivery, when on: closed alongside the egress listener, before the store. */
  readonly postbacks: Pick<Postbacks, 'close'> | undefined;
  /** Its buffered spans are exported once every request has ended (and so ended its span). */
  readonly tracing?: Pick<Tracing, 'shutdown'>;
  readonly log: Logger;
  readonly drainDelayMs: number;
  readonly maxDelayMs: number;
  /** Called first: readiness turns false and answers ask clients to close their connections. */
  readonly beginDraining: () => void;
}

/**
 * The graceful stop, once, whoever asks (SIGTERM, SIGINT, /quitquitquit): unready at once, keep serving for the
 * drain delay so endpoints and load balancers move away, stop accepting, let in-flight requests finish up to the
 * maximum delay, then answer whoever is still waiting and close everything.
 */
export function createShutdown(parts: ShutdownParts): {
  shutdown: (reason: string) => Promise<void>;
  stopped: Promise<void>;
} {
  let finish: () => void = () => undefined;
  const stopped = new Promise<void>((resolve) => (finish = resolve));
  let running: Promise<void> | undefined;
  const shutdown = (reason: string): Promise<void> =>
    (running ??= (async () => {
      await stop(parts, reason);
      finish();
    })());
  return { shutdown, stopped };
}

async function stop(parts: ShutdownParts, reason: string): Promise<void> {
  const { egress, tracker, log } = parts;
  parts.beginDraining();
  log.info(
    {
      event: 'shutdown.begin',
      reason,
      drainDelayMs: parts.drainDelayMs,
      maxDelayMs: parts.maxDelayMs,
      inFlight: tracker.active,
    },
    'draining',
  );
  await sleep(parts.drainDelayMs);
  const closing = closeServer(egress);
  // Postbacks still in flight finish within the same delay; the rest are answered 503 and redelivered.
  const closingPostbacks = parts.postbacks?.close(parts.maxDelayMs);
  const drained = await tracker.waitIdle(parts.maxDelayMs);
  // Out of time: every caller still waiting gets one definitive answer before its connection goes, never silence. A
  // request not sent yet (its body still arriving, say) is told so (503 sidecar.shutdown.draining: retry it on
  // another replica); one that may be at the gateway gets 504 outcome_unknown, never retryable.
  const abandoned = tracker.unanswered();
  const mayBeSent = abandoned.filter((request) => request.sendStarted);
  for (const request of abandoned) {
    const error = request.sendStarted ? sidecarErrors.outcomeUnknown(504, 'shutdown') : sidecarErrors.shuttingDown();
    // Answers at once and ends the request's work (its signal); its handler then records and logs what it got.
    void request.settle(errorSettlement(error, { attempts: 0 }), 'shutdown');
  }
  egress.closeAllConnections();
  await closing;
  await closingPostbacks;
  parts.tokens.stop();
  // Fleet mode: a token grant in flight finishes and reaches the store (and the token lock is released) first.
  await parts.tokens.settle();
  await (drained ? parts.gatewayClient.close() : parts.gatewayClient.destroy());
  // The requests cut off above now fail at once (their gateway connections are gone); each still writes its
  // idempotency record (outcome_unknown kept, draining released) before the store closes.
  const settled = await tracker.settled(REQUESTS_SETTLE_MAX_MS);
  if (parts.tracing !== undefined) await flushTraces(parts.tracing);
  // Last: every request that could still write to the store (an idempotency record, a postback) has finished.
  await parts.store.close();
  const { admin } = parts;
  await closeServer(admin);
  admin.closeAllConnections();
  log.info(
    {
      event: 'shutdown.done',
      drained,
      answeredOutcomeUnknown: mayBeSent.length,
      answeredNotSent: abandoned.length - mayBeSent.length,
      requestsSettled: settled,
    },
    'stopped',
  );
}

/** Exports the spans still buffered, waiting TRACES_FLUSH_MAX_MS at most. */
export async function flushTraces(tracing: Pick<Tracing, 'shutdown'>): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  const cap = new Promise<void>((resolve) => (timer = setTimeout(resolve, TRACES_FLUSH_MAX_MS).unref()));
  await Promise.race([tracing.shutdown().catch(() => undefined), cap]);
  clearTimeout(timer);
}
