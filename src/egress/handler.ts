import type { IncomingHttpHeaders, IncomingMessage, ServerResponse } from 'node:http';
import { DeadlineList } from '../time/deadline-list.js';
import { asSidecarError, sidecarErrors, type SidecarError } from '../errors.js';
import { requestFingerprint } from '../idempotency/fingerprint.js';
import type { Claim, IdempotencyKeeper } from '../idempotency/keeper.js';
import { IDEMPOTENCY_KEY_HEADER, idempotencyKey, type IdempotencyKey } from '../idempotency/key.js';
import type { LimitGuard } from '../limits/guard.js';
import type { Logger } from '../observability/log.js';
import type { SidecarMetrics } from '../observability/metrics.js';
import { NO_TRACING, type Tracing } from '../observability/tracing.js';
import { StateStoreUnavailableError } from '../state/state-store.js';
import { answerCorrelation } from '../upstream/gateway-answer.js';
import { errorCode } from '../upstream/upstream-errors.js';
import { isJsonContentType, readBody, wrapEnvelope, type Envelope } from './body.js';
import type { CallerCheck } from './caller-check.js';
import type { BodyBudget } from '../inbound/body-budget.js';
import { requestId, type RequestId } from '../inbound/request-id.js';
import { exchange, type ExchangeDeps, type ExchangeResult } from './gateway-exchange.js';
import { forwardableRequestHeaders, forwardableResponseHeaders } from './headers.js';
import { logVerifyFailure } from './request-log.js';
import { errorSettlement, EgressRequest, type RequestParts, type Settlement } from './request.js';
import { startServerSpan } from './request-span.js';
import type { SignedCopy, SignedRequest } from './request-signing.js';
import { UNMATCHED_ROUTE, type RouteMatch } from './routes.js';

export interface IdempotencyDeps {
  readonly keeper: Pick<IdempotencyKeeper, 'claim' | 'complete' | 'release' | 'markSending'>;
  /** SIDECAR_IDEMPOTENCY_REQUIRED: a signed request without a key is refused (428). */
  readonly required: boolean;
}

export interface HandlerDeps {
  /** The exchange with the gateway: tokens, signing per copy, the gateway client, the retry contract's deadline. */
  readonly gateway: ExchangeDeps<SignedRequest, SignedCopy>;
  readonly route: (method: string, requestTarget: string) => RouteMatch;
  readonly maxBodyBytes: number;
  /** Refuses requests not addressed to the sidecar by name, or made by a browser (caller-check.ts). */
  readonly checkCaller: CallerCheck;
  /** The client headers sent on to the gateway, lowercase (Config.forwardedRequestHeaders). */
  readonly forwardedRequestHeaders: ReadonlySet<string>;
  /** Shared by the bodies of every request of the listener: a large body that does not fit is refused (503). */
  readonly bodyBudget: BodyBudget;
  readonly answerCorrelationFields: readonly string[];
  readonly log: Logger;
  readonly metrics: SidecarMetrics;
  readonly idempotency: IdempotencyDeps;
  /** The money limits (docs/limits.md), when SIDECAR_LIMITS_FILE is set. */
  readonly limits?: Pick<LimitGuard, 'reserve' | 'release'> | undefined;
  /** How long a request may take from its arrival: its deadline (docs/architecture.md). */
  readonly requestDeadlineMs: number;
  /** True once shutdown began: answers then carry Connection: close. */
  readonly draining: () => boolean;
  /** True past the memory high-water mark (memory/pressure.ts): new requests are refused before their body is read. */
  readonly overloaded: () => boolean;
  /** The request's server span (docs/operations.md#tracing). */
  readonly tracing?: Tracing;
}

/**
 * Whether Node found an `Expect` it cannot meet: one other than 100-continue on an HTTP/1.1 request, which it hands
 * to the server's 'checkExpectation' listeners instead of 'request' (100-continue it answers itself).
 */
export type Expectation = 'none or met' | 'unmet';

export type EgressHandler = (req: IncomingMessage, res: ServerResponse, expectation?: Expectation) => EgressRequest;

/**
 * The egress listener's request handler: turns one client request into exactly one definitive answer, the
 * gateway's or a sidecar.* error. It returns the request at once (the connection tracker follows it) and works on
 * it in the background until it is settled.
 */
export function createEgressHandler(deps: HandlerDeps): EgressHandler {
  const parts: RequestParts = {
    log: deps.log,
    metrics: deps.metrics,
    keeper: deps.idempotency.keeper,
    draining: deps.draining,
    bodyBudget: deps.bodyBudget,
    deadlines: new DeadlineList(deps.requestDeadlineMs),
  };
  const tracing = deps.tracing ?? NO_TRACING;
  return (req, res, expectation = 'none or met') => {
    const match = deps.route(req.method ?? '', req.url ?? '/');
    const route = match.kind === 'not_found' ? UNMATCHED_ROUTE : match.route;
    const id = requestId(req.headers['x-request-id']);
    // Off, no span and no attributes are made: nothing per request.
    const span = tracing.enabled ? startServerSpan(tracing, req, route, id) : undefined;
    const request = new EgressRequest(id, route, req, res, parts, span);
    void serve(deps, req, request, match, expectation);
    return request;
  };
}

/** Handles the request and settles it; never rejects (a failure to settle is a bug, logged). */
async function serve(
  deps: HandlerDeps,
  req: IncomingMessage,
  request: EgressRequest,
  match: RouteMatch,
  expectation: Expectation,
) {
  try {
    let settlement: Settlement;
    try {
      settlement = await handle(deps, req, request, match, expectation);
    } catch (err) {
      settlement = refusal(deps, req, asSidecarError(err));
    }
    await request.settle(settlement);
  } catch (err) {
    deps.log.error({ event: 'handler.bug', ...describeBug(err) }, 'request accounting failed');
  }
}

async function handle(
  deps: HandlerDeps,
  req: IncomingMessage,
  request: EgressRequest,
  match: RouteMatch,
  expectation: Expectation,
): Promise<Settlement> {
  // First, and on the headers alone: a request that is not an internal service's costs no body read, no key claim.
  const foreign = deps.checkCaller(req.headers);
  if (foreign !== undefined) throw foreign;
  if (expectation === 'unmet') throw sidecarErrors.expectationFailed();
  if (match.kind === 'not_found') throw sidecarErrors.routeNotFound();
  if (match.kind === 'method_not_allowed') throw sidecarErrors.methodNotAllowed('POST');
  if (!isJsonContentType(req.headers['content-type'])) throw sidecarErrors.unsupportedMediaType();
  if (deps.overloaded()) {
    deps.metrics.memory.requestShed('egress');
    throw sidecarErrors.overloaded();
  }
  const key = readIdempotencyKey(deps, req.headers);
  if (key !== undefined) request.useKey(key);
  reserveBody(deps, req, request);
  const payload = await readBody(req, deps.maxBodyBytes);
  const envelope = wrapEnvelope(payload);
  let beforeWrite: (() => Promise<void>) | undefined;
  if (key !== undefined) {
    const claim = await claimIdempotencyKey(deps, key, match, payload, request.id);
    if (claim.kind !== 'new') return replay(claim, payload);
    const { ticket } = claim;
    request.holdClaim(ticket);
    // The recovery point `sending`, right before each copy's first byte (the keeper's fence).
    beforeWrite = () => deps.idempotency.keeper.markSending(ticket);
  }
  // After the claim: a replay answers from its record and never counts against a limit twice.
  const reservation = await deps.limits?.reserve(match.route, envelope.payload, request.id, request);
  let sent: Sent | undefined;
  try {
    const headers = forwardableRequestHeaders(req.headers, deps.forwardedRequestHeaders);
    headers['x-request-id'] = request.id;
    const checkAnswer = answerCorrelation(deps.answerCorrelationFields, envelope.payload);
    // Shutdown may have answered while the body was arriving, telling the client nothing was sent: keep it so.
    if (!request.beginSending()) throw sidecarErrors.shuttingDown();
    const result = await exchange(deps.gateway, {
      route: match.route,
      target: match.target,
      envelope,
      headers,
      callerHeaders: req.headers,
      checkAnswer,
      end: request,
      trace: request.span?.context,
      beforeWrite,
    });
    sent = answerOf(deps, request.id, result, envelope, payload);
    return sent.settlement;
  } finally {
    // Given back when the gateway cannot have made the payment: nothing reached it, or it refused it. An outcome
    // unknown keeps it: the payment may exist, and counts as sent. Not waited for: the answer goes out at once; the
    // release is queued before any later payment of this replica on the rule.
    const nothingMade = sent === undefined ? !request.sendStarted : sent.nothingMade;
    if (reservation !== undefined && nothingMade) void deps.limits?.release(reservation, request.id);
  }
}

/** The handler's answer, and whether the gateway certainly made no payment of it. */
interface Sent {
  readonly settlement: Settlement;
  readonly nothingMade: boolean;
}

/**
 * What the exchange came back with, as the client's answer. Not async: an async step more is a KB or so of heap on
 * every request (docs/performance.md#allocations-per-request).
 */
function answerOf(
  deps: HandlerDeps,
  requestId: RequestId,
  result: ExchangeResult<SignedCopy>,
  envelope: Envelope,
  payload: Buffer,
): Sent {
  if (result.kind === 'failed') {
    const { error, attempts, hop } = result;
    const claimLost = error.code === 'sidecar.idempotency.claim_lost';
    // Counted apart from the claim's own outcome (`new`, already counted): the fence refused it, nothing sent.
    if (claimLost) deps.metrics.idempotency('claim_lost');
    const retryAfter = claimLost ? { 'retry-after': '1' } : {};
    const outcome = { attempts, causeCode: errorCode(error.cause), causeFamily: hop, payload };
    return { settlement: errorSettlement(error, outcome, retryAfter), nothingMade: error.nothingSent };
  }
  const { response, gatewayCode, label, attempts } = result;
  if (gatewayCode === 'signature.verify.failed') logVerifyFailure(deps.log, requestId, result.copy, envelope.data);
  const code = label ?? 'ok';
  const { status, body } = response;
  const answerHeaders = forwardableResponseHeaders(response.headers);
  return {
    settlement: {
      status,
      code,
      headers: answerHeaders,
      body,
      keep: { kind: 'store', answer: { status, headers: answerHeaders, body, code } },
      outcome: { gatewayCode: gatewayCode?.slice(0, 100), attempts, payload },
    },
    nothingMade: refusedByGateway(status, gatewayCode),
  };
}

/**
 * A 4xx: the gateway refused the request and made nothing of it. But a 409 (a conflict: a duplicate may be the
 * payment itself) and `signature.nonce.replayed` (the gateway saw this nonce before: an earlier copy of this very
 * request, resent on the way by a network hop, may have been accepted): the payment may exist.
 */
function refusedByGateway(status: number, gatewayCode: string | undefined): boolean {
  return status >= 400 && status < 500 && status !== 409 && gatewayCode !== 'signature.nonce.replayed';
}

/**
 * Takes the body's share of the body budget, before a byte of it is read, and gives it back once the request has
 * settled: its bytes, their envelope and parse live as long as the request does. Throws budget_exhausted (nothing
 * was sent) when it does not fit.
 */
function reserveBody(deps: HandlerDeps, req: IncomingMessage, request: EgressRequest): void {
  const reserved = deps.bodyBudget.reserveDeclared(req.headers['content-length'], deps.maxBodyBytes);
  if (reserved === undefined) throw sidecarErrors.bodyBudgetExhausted();
  if (reserved > 0) request.holdBody(reserved);
}

/** The answer an earlier request with this key got (or outcome_unknown for one abandoned): nothing is sent. */
function replay(claim: Exclude<Admitted, { kind: 'new' }>, payload: Buffer): Settlement {
  const { answer } = claim;
  const causeCode = claim.kind === 'abandoned' ? 'ERR_IDEMPOTENCY_ABANDONED' : undefined;
  return {
    status: answer.status,
    code: answer.code,
    headers: { ...answer.headers, 'idempotent-replayed': 'true' },
    body: answer.body,
    keep: { kind: 'store', answer },
    outcome: { attempts: 0, causeCode, payload, replayed: true },
  };
}

/** Refusals whose cause passes within a second or so: the answer says when to send again. */
const RETRY_SHORTLY: ReadonlySet<string> = new Set([
  'sidecar.idempotency.in_progress',
  'sidecar.body.budget_exhausted',
  'sidecar.overloaded',
]);

/** A request refused before anything was sent. */
function refusal(deps: HandlerDeps, req: IncomingMessage, error: SidecarError): Settlement {
  if (error.code === 'sidecar.internal')
    deps.log.error({ event: 'handler.error', ...describeBug(error.cause) }, 'unexpected error');
  const headers: Record<string, string> = {};
  // A refused body may still be arriving: close the connection after answering rather than read it all.
  if (!req.complete) headers.connection = 'close';
  if (error.code === 'sidecar.method.not_allowed') headers.allow = 'POST';
  if (RETRY_SHORTLY.has(error.code)) headers['retry-after'] = '1';
  return errorSettlement(error, { attempts: 0 }, headers);
}

/** The request's key (undefined: none); throws key_invalid (malformed) or key_required (missing, when required). */
function readIdempotencyKey(deps: HandlerDeps, headers: IncomingHttpHeaders): IdempotencyKey | undefined {
  try {
    const key = idempotencyKey(headers[IDEMPOTENCY_KEY_HEADER]);
    if (key === undefined && deps.idempotency.required) throw sidecarErrors.idempotencyKeyRequired();
    return key;
  } catch (err) {
    const required = (err as SidecarError).code === 'sidecar.idempotency.key_required';
    deps.metrics.idempotency(required ? 'key_required' : 'key_invalid');
    throw err;
  }
}

type Admitted = Extract<Claim, { kind: 'new' | 'replayed' | 'abandoned' }>;

/**
 * Claims the key for this request (after its body was read and validated). `new`: send it; `replayed` and
 * `abandoned`: answer from the record. Throws 409 in_progress, 422 key_reused, 503 unavailable, 500
 * record_unverified: none sends.
 */
async function claimIdempotencyKey(
  deps: HandlerDeps,
  key: IdempotencyKey,
  match: Extract<RouteMatch, { kind: 'signed' }>,
  payload: Buffer,
  id: string,
): Promise<Admitted> {
  const fingerprint = requestFingerprint(match.route, match.target.query, payload);
  let claim: Claim;
  try {
    claim = await deps.idempotency.keeper.claim(key, fingerprint, id);
  } catch (err) {
    if (!(err instanceof StateStoreUnavailableError)) throw err;
    // Sending without the record could turn the caller's retry into a second payment: refused instead.
    deps.metrics.idempotency('unavailable');
    throw sidecarErrors.idempotencyUnavailable(err);
  }
  deps.metrics.idempotency(claim.kind === 'new' && claim.tookOverFrom !== undefined ? 'taken_over' : claim.kind);
  if (claim.kind === 'in_progress') throw sidecarErrors.idempotencyInProgress();
  if (claim.kind === 'key_reused') throw sidecarErrors.idempotencyKeyReused();
  if (claim.kind === 'unverified') throw sidecarErrors.idempotencyRecordUnverified();
  if (claim.kind === 'abandoned') {
    // For reconciliation: the request that claimed the key and may have reached the gateway before its replica died.
    deps.log.warn(
      {
        event: 'idempotency.abandoned',
        requestId: id,
        abandonedRequestId: claim.owner,
        idempotencyKeySha256: key.sha256,
      },
      'an earlier request with this key never recorded its answer; answered outcome_unknown, not sent again',
    );
  }
  return claim;
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
