// One postback from the gateway, answered once: source, route, body, verification, replay memory, forward. The
// answer tells the gateway whether to redeliver (503) or stop (200, or a refusal that would only repeat).
import { randomUUID } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { sourceAllowed, type PostbackSourceAllowList } from '../config/postback-settings.js';
import type { Logger } from '../observability/log.js';
import type { PostbackMetrics } from '../observability/postback-metrics.js';
import { NO_TRACING, type TraceContext, type TraceSpan, type Tracing } from '../observability/tracing.js';
import { writeAnswer } from '../inbound/answer.js';
import { readBoundedBody } from '../inbound/body.js';
import type { BodyBudget } from '../inbound/body-budget.js';
import { requestId } from '../inbound/request-id.js';
import { StateStoreUnavailableError } from '../state/state-store.js';
import { forwardHeaders, type PostbackForwarder } from './forward.js';
import { orderKeyOf, postbackIdOf, type PostbackInbox } from './inbox.js';
import { postbackRefusals, PostbackRefusal, RETRY_AFTER_SECONDS, type PostbackOutcome } from './refusal.js';
import type { ReplayMemory } from './replay-memory.js';
import type { PostbackVerifier, VerifiedPostback } from './verify-postback.js';

/** Spec 8 leaves payload sizes open; a postback is a few hundred bytes, so the egress default is generous. */
export const MAX_POSTBACK_BYTES = 1_048_576;

export interface PostbackHandlerDeps {
  /** The public URL's path: the one route served. */
  readonly path: string;
  readonly allow: PostbackSourceAllowList | undefined;
  readonly verify: PostbackVerifier;
  readonly memory: ReplayMemory;
  readonly forwarder: PostbackForwarder;
  /**
   * `queued` delivery: postbacks are kept in the inbox and answered at once, and a delivery worker forwards them,
   * those with the same `orderField` value (one transaction's) in arrival order.
   */
  readonly queue?: PostbackQueue;
  /** Bytes of large bodies buffered at once, across the receiver's connections. */
  readonly budget: BodyBudget;
  readonly metrics: PostbackMetrics;
  readonly log: Logger;
  readonly nowMs: () => number;
  /** Aborted when the receiver stops waiting for forwards at shutdown. */
  readonly stopping: AbortSignal;
  /** A span per postback and per delivery; the delivery's traceparent goes to the application. */
  readonly tracing?: Tracing;
  /** Continue the sender's traceparent rather than start a trace (the gateway is a third party). */
  readonly continueSenderTrace?: boolean;
}

export interface PostbackQueue {
  readonly inbox: PostbackInbox;
  readonly orderField: string;
}

/** What the log line and the answer are made of; filled in as the postback goes through. */
interface Delivery {
  readonly requestId: string;
  /** Owner of the in-flight claim: unique per request (a sender's X-Request-Id may repeat across copies). */
  readonly claimOwner: string;
  /** Body bytes reserved in the budget, released once answered. */
  reserved: number;
  /** The whole body was read: the connection may serve another request. */
  bodyRead: boolean;
  postback?: VerifiedPostback;
  /** Its id (X-Postback-Id, webhook-id): set once it is forwarded or kept. */
  postbackId?: string;
  nonceReplayed?: boolean;
  internalStatus?: number;
  forwardFailure?: string;
  /** The class of an unexpected failure (never its message). */
  error?: string;
  /** The receive span's context (tracing on): deliveries are traced under it. */
  readonly trace?: TraceContext | undefined;
}

interface Answer {
  readonly outcome: PostbackOutcome;
  readonly status: number;
  readonly body: object;
}

const ok = (outcome: 'forwarded' | 'accepted' | 'duplicate'): Answer => ({
  outcome,
  status: 200,
  body: { status: outcome },
});

function check(req: IncomingMessage, deps: PostbackHandlerDeps): void {
  if (!sourceAllowed(deps.allow, req.socket.remoteAddress)) throw postbackRefusals.sourceForbidden();
  const path = (req.url ?? '').split('?', 1)[0];
  if (path !== deps.path) throw postbackRefusals.notFound();
  if (req.method !== 'POST') throw postbackRefusals.methodNotAllowed();
}

async function body(req: IncomingMessage, deps: PostbackHandlerDeps, delivery: Delivery): Promise<Buffer> {
  const declared = Number(req.headers['content-length']);
  const reserved = deps.budget.reserve(Number.isFinite(declared) ? declared : undefined, MAX_POSTBACK_BYTES);
  if (reserved === undefined) throw postbackRefusals.busy();
  delivery.reserved = reserved;
  const read = await readBoundedBody(req, MAX_POSTBACK_BYTES);
  if (read.kind === 'too_large') throw postbackRefusals.tooLarge(read.limit);
  if (read.kind === 'incomplete') throw postbackRefusals.bodyInvalid('the body was not received completely');
  delivery.bodyRead = true;
  return read.bytes;
}

/**
 * Records the postback as delivered (forwarded, or kept in the inbox). A failure is only logged: the postback is
 * delivered or kept all the same, and a 503 would make the gateway send it again; only a redelivery that the
 * gateway makes anyway could now go through twice, and the log line says so.
 */
async function remember(deps: PostbackHandlerDeps, delivery: Delivery, postback: VerifiedPostback): Promise<void> {
  try {
    await deps.memory.delivered(postback.digest, delivery.claimOwner);
  } catch (err) {
    deps.log.warn(
      { event: 'postback.memory_failed', requestId: delivery.requestId, err: errorName(err) },
      'not remembered',
    );
  }
}

async function forwardOnce(deps: PostbackHandlerDeps, delivery: Delivery, postback: VerifiedPostback): Promise<Answer> {
  const { memory } = deps;
  const claim = await memory.claim(postback.digest, delivery.claimOwner);
  if (claim.kind === 'delivered') return ok('duplicate');
  if (claim.kind === 'in_flight') throw postbackRefusals.inProgress();
  const span = deps.tracing?.enabled
    ? deps.tracing.startSpan('postback delivery', 'client', delivery.trace)
    : undefined;
  const traceHeaders = span?.context === undefined ? undefined : deps.tracing?.headers(span.context);
  delivery.postbackId = postbackIdOf(postback.digest);
  const result = await deps.forwarder.forward(postback, delivery.requestId, deps.stopping, traceHeaders);
  if (span !== undefined) endDelivery(span, result.status, result.failure);
  deps.metrics.forwarded(result.seconds);
  delivery.internalStatus = result.status;
  delivery.forwardFailure = result.failure;
  if (result.status !== undefined && result.status >= 200 && result.status < 300) {
    await remember(deps, delivery, postback);
    return ok('forwarded');
  }
  await memory.release(postback.digest, delivery.claimOwner).catch(() => undefined); // the claim's TTL frees it too
  const why =
    result.status === undefined ? `could not be delivered (${result.failure ?? 'error'})` : `answered ${result.status}`;
  throw postbackRefusals.forwardFailed(`the internal service ${why}; deliver it again later`);
}

/**
 * `queued` delivery: the same claim as a forward, so that two copies arriving at once are not both appended. The
 * append is idempotent too (the postback's id is its payload's digest): a copy that arrives after an append whose
 * answer was lost (a 503) is `duplicate`, and its 200 waits for the replicas like the first append did.
 */
async function acceptOnce(
  deps: PostbackHandlerDeps,
  { inbox, orderField }: PostbackQueue,
  delivery: Delivery,
  postback: VerifiedPostback,
): Promise<Answer> {
  const { memory } = deps;
  const claim = await memory.claim(postback.digest, delivery.claimOwner);
  if (claim.kind === 'delivered') return ok('duplicate');
  if (claim.kind === 'in_flight') throw postbackRefusals.inProgress();
  const id = postbackIdOf(postback.digest);
  let appended: 'accepted' | 'duplicate';
  try {
    appended = await inbox.append(
      {
        id,
        payload: postback.payload.toString('utf8'),
        // Traced: the application's spans join the arrival's trace, whenever the delivery happens.
        headers: forwardHeaders(postback, delivery.requestId, traceHeadersOf(deps, delivery.trace)),
        orderKey: orderKeyOf(postback.payload, orderField, id),
      },
      deps.nowMs(),
    );
  } catch (err) {
    await memory.release(postback.digest, delivery.claimOwner).catch(() => undefined);
    throw err;
  }
  delivery.postbackId = id;
  await remember(deps, delivery, postback);
  return ok(appended);
}

async function receive(req: IncomingMessage, deps: PostbackHandlerDeps, delivery: Delivery): Promise<Answer> {
  check(req, deps);
  const raw = await body(req, deps, delivery);
  const postback = deps.verify(req.headers, raw, Math.floor(deps.nowMs() / 1000));
  delivery.postback = postback;
  try {
    if (postback.nonce !== undefined) {
      delivery.nonceReplayed = !(await deps.memory.recordNonce(postback.nonce, postback.digest));
    }
    if (deps.queue !== undefined) return await acceptOnce(deps, deps.queue, delivery, postback);
    return await forwardOnce(deps, delivery, postback);
  } catch (err) {
    if (err instanceof StateStoreUnavailableError) throw postbackRefusals.stateUnavailable(err);
    throw err;
  }
}

/** The delivery span: the application's status, or why there is none; anything but a 2xx is an error. */
function endDelivery(span: TraceSpan, status: number | undefined, failure: string | undefined): void {
  span.setAttributes({ 'http.response.status_code': status, 'sidecar.cause_code': failure });
  if (status === undefined || status < 200 || status >= 300) span.fail(failure ?? String(status));
  span.end();
}

/** The receive span: a new trace, or the sender's when continueSenderTrace. Never the path (it may hold a secret). */
function receiveSpan(deps: PostbackHandlerDeps, req: IncomingMessage, requestId: string): TraceSpan | undefined {
  const tracing = deps.tracing ?? NO_TRACING;
  if (!tracing.enabled) return undefined;
  const parent = deps.continueSenderTrace
    ? tracing.extract(req.headers.traceparent, req.headers.tracestate)
    : undefined;
  return tracing.startSpan('postback receive', 'server', parent, {
    'http.request.method': req.method === 'POST' ? 'POST' : '_OTHER',
    'sidecar.request_id': requestId,
  });
}

function traceHeadersOf(deps: PostbackHandlerDeps, trace: TraceContext | undefined) {
  return trace === undefined || deps.tracing?.enabled !== true ? undefined : deps.tracing.headers(trace);
}

function errorName(err: unknown): string {
  return err instanceof Error ? err.name : 'error';
}

function respond(req: IncomingMessage, res: ServerResponse, answer: Answer, id: string, bodyRead: boolean): void {
  const headers: Record<string, string | number> = { 'content-type': 'application/json', 'x-request-id': id };
  if (answer.status === 503) headers['retry-after'] = RETRY_AFTER_SECONDS;
  if (answer.status === 405) headers.allow = 'POST';
  // Answered before its body was read (403, 404, 405, 413, busy, a broken body): the connection closes rather than
  // reading the rest, which a hostile sender could stream until the request deadline.
  if (!bodyRead) headers.connection = 'close';
  // A sender whose body is too large is told so even if it writes the whole body before reading: the rest is read
  // and dropped within bounds. Other early refusals close at once: their senders are not trusted.
  const ending = answer.status === 413 ? 'after-unread-body' : 'now';
  writeAnswer(req, res, { status: answer.status, headers, body: JSON.stringify(answer.body) }, ending);
}

function logLine(
  deps: PostbackHandlerDeps,
  answer: Answer,
  delivery: Delivery,
  code: string | undefined,
  ms: number,
): void {
  const { postback } = delivery;
  const fields = {
    event: 'postback',
    outcome: answer.outcome,
    requestId: delivery.requestId,
    status: answer.status,
    code,
    verified: postback?.verified,
    nonce: postback?.nonce,
    nonceReplayed: delivery.nonceReplayed,
    payloadDigest: postback?.digest,
    postbackId: delivery.postbackId,
    internalStatus: delivery.internalStatus,
    forwardFailure: delivery.forwardFailure,
    error: delivery.error,
    durationMs: Math.round(ms),
    traceId: delivery.trace?.traceId,
    spanId: delivery.trace?.spanId,
  };
  if (answer.status < 300) deps.log.info(fields, 'postback');
  else deps.log.warn(fields, 'postback refused');
}

export function createPostbackHandler(deps: PostbackHandlerDeps) {
  return async (req: IncomingMessage, res: ServerResponse): Promise<void> => {
    const started = performance.now();
    const id = requestId(req.headers['x-request-id']);
    const span = receiveSpan(deps, req, id);
    const delivery: Delivery = {
      requestId: id,
      claimOwner: randomUUID(),
      reserved: 0,
      bodyRead: false,
      trace: span?.context,
    };
    let answer: Answer;
    let code: string | undefined;
    try {
      answer = await receive(req, deps, delivery);
    } catch (err) {
      const refusal = err instanceof PostbackRefusal ? err : postbackRefusals.internal(err);
      answer = { outcome: refusal.outcome, status: refusal.status, body: refusal.toBody() };
      code = refusal.code;
      // An unexpected failure is logged by its class only: its message could quote a header or the body.
      if (refusal.code === 'postback.internal') delivery.error = errorName(refusal.cause);
    }
    deps.budget.release(delivery.reserved);
    respond(req, res, answer, delivery.requestId, delivery.bodyRead);
    deps.metrics.postback(answer.outcome);
    logLine(deps, answer, delivery, code, performance.now() - started);
    if (span !== undefined) {
      span.setAttributes({
        'http.response.status_code': answer.status,
        'sidecar.postback.outcome': answer.outcome,
        'sidecar.code': code,
        'sidecar.postback.verified': delivery.postback?.verified,
        'sidecar.postback.forward_status': delivery.internalStatus,
      });
      if (answer.status >= 500) span.fail(code);
      span.end();
    }
  };
}
