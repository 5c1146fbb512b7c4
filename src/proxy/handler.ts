import type { IncomingMessage } from 'node:http';
import { asSidecarError, sidecarErrors, type SidecarError } from '../errors.js';
import type { Logger } from '../observability/log.js';
import type { SidecarMetrics } from '../observability/metrics.js';
import { causeFamily, errorCode } from '../upstream/forwarder.js';
import { answerCorrelation } from './answer-correlation.js';
import { isJsonContentType, readBody } from './body.js';
import { wrapEnvelope } from './envelope.js';
import { errorLabel } from './gateway-answer.js';
import { forwardableRequestHeaders, forwardableResponseHeaders } from './headers.js';
import {
  claimIdempotencyKey,
  keepError,
  readIdempotencyKey,
  settleIdempotencyKey,
  type Admitted,
  type IdempotencyDeps,
  type Keep,
  type RequestKey,
} from './idempotent.js';
import type { InboundExchange } from './inbound-exchange.js';
import { PendingCalls } from './pending-calls.js';
import { logRequest, logVerifyFailure, type RequestOutcome } from './request-log.js';
import { UNMATCHED_ROUTE, type RouteMatch } from './routes.js';
import { sendSigned, type SignedSendDeps } from './signed-send.js';

export interface HandlerDeps extends SignedSendDeps {
  readonly route: (method: string, requestTarget: string) => RouteMatch;
  readonly maxBodyBytes: number;
  readonly answerCorrelationFields: readonly string[];
  readonly log: Logger;
  readonly metrics: SidecarMetrics;
  readonly idempotency: IdempotencyDeps;
}

export interface ProxyHandler {
  /** Turns one client request into exactly one definitive answer: the gateway's, or a sidecar.* error. */
  handle(req: IncomingMessage, exchange: InboundExchange): void;
  /**
   * Resolves true once every request's handling has finished (its idempotency record written, its line logged),
   * or false after `timeoutMs`. A request answered by shutdown is still being handled: shutdown waits here
   * before it closes the state store.
   */
  idle(timeoutMs: number): Promise<boolean>;
}

export function createProxyHandler(deps: HandlerDeps): ProxyHandler {
  const pending = new PendingCalls();
  return {
    handle: (req, exchange) =>
      pending.track(
        serve(deps, req, exchange).catch((err: unknown) =>
          deps.log.error({ event: 'handler.bug', ...describeBug(err) }, 'request accounting failed'),
        ),
      ),
    idle: (timeoutMs) => pending.idle(timeoutMs),
  };
}

/** How a request ended, and its answer: written only once the request's line is out (see serve). */
interface Handled {
  readonly outcome: RequestOutcome;
  readonly reply: () => void;
  /** What the request's idempotency record keeps of this answer, if the request holds a key. */
  readonly keep: Keep;
}

async function serve(deps: HandlerDeps, req: IncomingMessage, exchange: InboundExchange): Promise<void> {
  const started = performance.now();
  const match = deps.route(req.method ?? '', req.url ?? '/');
  const key: RequestKey = {};
  let handled: Handled;
  try {
    handled = await handle(deps, req, exchange, match, key);
  } catch (err) {
    handled = fail(deps, req, exchange, asSidecarError(err));
  }
  const outcome = { ...exchange.finalOutcome(handled.outcome), idempotencyKeySha256: key.key?.sha256 };
  // Recorded before the answer leaves: a caller that retries the moment it has its answer finds it kept.
  if (key.ticket !== undefined) await settleIdempotencyKey(deps.idempotency, key.ticket, handled.keep, outcome);
  const durationMs = performance.now() - started;
  const route = match.kind === 'not_found' ? UNMATCHED_ROUTE : match.route;
  try {
    deps.metrics.requestDone(route, outcome.status, outcome.code, durationMs / 1000);
    logRequest(deps.log, exchange.id, route, durationMs, outcome);
  } finally {
    // The line is on stdout before the answer leaves: a kill right after the client has its answer keeps it.
    handled.reply();
  }
}

async function handle(
  deps: HandlerDeps,
  req: IncomingMessage,
  exchange: InboundExchange,
  match: RouteMatch,
  key: RequestKey,
): Promise<Handled> {
  if (match.kind === 'not_found') throw sidecarErrors.routeNotFound();
  if (match.kind === 'method_not_allowed') throw sidecarErrors.methodNotAllowed('POST');
  if (!isJsonContentType(req.headers['content-type'])) throw sidecarErrors.unsupportedMediaType();
  const idempotencyKey = readIdempotencyKey(deps, req.headers);
  if (idempotencyKey !== undefined) key.key = idempotencyKey;
  const payload = await readBody(req, deps.maxBodyBytes);
  const envelope = wrapEnvelope(payload);
  if (idempotencyKey !== undefined) {
    const claim = await claimIdempotencyKey(deps, idempotencyKey, match, payload, exchange.id);
    if (claim.kind !== 'new') return replay(exchange, claim, payload);
    key.ticket = claim.ticket;
  }
  const headers = forwardableRequestHeaders(req.headers);
  headers['x-request-id'] = exchange.id;
  const checkAnswer = answerCorrelation(deps.answerCorrelationFields, envelope.payload);
  // Shutdown may have answered while the body was arriving, telling the client nothing was sent: keep it so.
  if (!exchange.beginSending()) throw sidecarErrors.shuttingDown();
  const result = await sendSigned(deps, { route: match.route, target: match.target, envelope, headers, checkAnswer });
  if (result.kind === 'failed') {
    const { error, attempts } = result;
    return {
      outcome: {
        status: error.status,
        code: error.code,
        attempts,
        causeCode: errorCode(error.cause),
        causeFamily: error.code.startsWith('sidecar.upstream.') ? causeFamily(error.cause) : undefined,
        payload,
      },
      reply: () => exchange.fail(error),
      keep: keepError(error),
    };
  }
  const { response, gatewayCode, attempts } = result;
  if (gatewayCode === 'signature.verify.failed') logVerifyFailure(deps.log, exchange.id, result, envelope.data);
  const code = errorLabel(response.status, gatewayCode) ?? 'ok';
  const answerHeaders = forwardableResponseHeaders(response.headers);
  return {
    outcome: { status: response.status, code, gatewayCode: gatewayCode?.slice(0, 100), attempts, payload },
    // A copy of the headers: the exchange adds the request's own X-Request-Id to what it is given.
    reply: () => exchange.answer(response.status, { ...answerHeaders }, response.body, code),
    keep: { kind: 'store', answer: { status: response.status, headers: answerHeaders, body: response.body, code } },
  };
}

/** The answer an earlier request with this key got (or outcome_unknown for one abandoned): nothing is sent. */
function replay(exchange: InboundExchange, claim: Exclude<Admitted, { kind: 'new' }>, payload: Buffer): Handled {
  const { answer } = claim;
  const causeCode = claim.kind === 'abandoned' ? 'ERR_IDEMPOTENCY_ABANDONED' : undefined;
  return {
    outcome: { status: answer.status, code: answer.code, attempts: 0, causeCode, payload, replayed: true },
    reply: () =>
      exchange.answer(answer.status, { ...answer.headers, 'idempotent-replayed': 'true' }, answer.body, answer.code),
    keep: { kind: 'store', answer },
  };
}

function fail(deps: HandlerDeps, req: IncomingMessage, exchange: InboundExchange, error: SidecarError): Handled {
  if (error.code === 'sidecar.internal')
    deps.log.error({ event: 'handler.error', ...describeBug(error.cause) }, 'unexpected error');
  const headers: Record<string, string> = {};
  // A refused body may still be arriving: close the connection after answering rather than read it all.
  if (!req.complete) headers.connection = 'close';
  if (error.code === 'sidecar.method.not_allowed') headers.allow = 'POST';
  if (error.code === 'sidecar.idempotency.in_progress') headers['retry-after'] = '1';
  return {
    outcome: { status: error.status, code: error.code, attempts: 0 },
    reply: () => exchange.fail(error, 'handler', headers),
    keep: keepError(error),
  };
}

/**
 * A bug report without the error's message: messages of parsers and libraries can quote the values they
 * choked on, which may be payload or secrets. The name, code and call stack locate the bug well enough.
 */
function describeBug(cause: unknown): Record<string, string | undefined> {
  if (!(cause instanceof Error)) return { errorType: typeof cause };
  const frames = cause.stack
    ?.split('\n')
    .filter((line) => line.trimStart().startsWith('at '))
    .slice(0, 8)
    .join('\n');
  return { errorName: cause.name, errorCode: errorCode(cause), stack: frames };
}
