// One postback from the gateway, answered once: source, route, body, verification, replay memory, then the sink
// (delivered to the application, or kept in the inbox). The answer tells the gateway whether to redeliver (503) or
// stop (200, or a refusal that would only repeat). Each step returns what it learnt; the answer, the log line and
// the span are made from that.
import { randomUUID } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { isIP } from 'node:net';
import { errorName } from '../errors.js';
import type { PostbackSourceAllowList } from '../config/postback-settings.js';
import { writeAnswer } from '../inbound/answer.js';
import { readBoundedBody } from '../inbound/body.js';
import type { BodyBudget } from '../inbound/body-budget.js';
import { requestId } from '../inbound/request-id.js';
import { POSTBACK_MAX_BODY_BYTES } from '../memory/budget.js';
import type { Logger } from '../observability/log.js';
import type { PostbackMetrics } from '../observability/postback-metrics.js';
import { NO_TRACING, type TraceSpan, type Tracing } from '../observability/tracing.js';
import { StateStoreUnavailableError } from '../state/state-store.js';
import { postbackRefusals, PostbackRefusal, RETRY_AFTER_SECONDS, type PostbackOutcome } from './refusal.js';
import type { ReplayMemory } from './replay-memory.js';
import type { Arrival, DeliveryReport, PostbackSink } from './sink.js';
import type { PostbackVerifier, Verification, VerifiedPostback } from './verify-postback.js';

export interface PostbackHandlerDeps {
  /** The public URL's path: the one route served. */
  readonly path: string;
  readonly allow: PostbackSourceAllowList | undefined;
  readonly verify: PostbackVerifier;
  readonly memory: ReplayMemory;
  /** Where a verified postback goes: delivered now, or kept in the inbox (sink.ts). */
  readonly sink: PostbackSink;
  /** Bytes of large bodies buffered at once, across the receiver's connections. */
  readonly budget: BodyBudget;
  /** True past the memory high-water mark: the postback is answered 503 before its body is read (redelivered). */
  readonly overloaded: () => boolean;
  readonly onShed: () => void;
  readonly metrics: PostbackMetrics;
  readonly log: Logger;
  readonly nowMs: () => number;
  /** A span per postback; the sink traces its delivery under it. */
  readonly tracing?: Tracing;
  /** Continue the sender's traceparent rather than start a trace (the gateway is a third party). */
  readonly continueSenderTrace?: boolean;
  /** Aborted when the receiver stops waiting for its open answers at shutdown (the sink's deliveries give up). */
  readonly stopping: AbortSignal;
}

/** What the log line and the span say beyond the answer: each step adds what it learnt. */
interface Facts {
  /** The whole body was read: the connection may serve another request. */
  readonly bodyRead: boolean;
  readonly postback?: VerifiedPostback;
  readonly nonceReplayed?: boolean | undefined;
  readonly delivery?: DeliveryReport;
  /** The class of an unexpected failure (never its message). */
  readonly error?: string;
}

/** One postback's end: its answer, its refusal code if refused, and the facts. */
interface Handled extends Facts {
  readonly answer: Answer;
  readonly code: string | undefined;
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

function taken(outcome: 'forwarded' | 'accepted' | 'duplicate', facts: Facts): Handled {
  return { answer: ok(outcome), code: undefined, ...facts };
}

function refused(refusal: PostbackRefusal, facts: Facts): Handled {
  const answer = { outcome: refusal.outcome, status: refusal.status, body: refusal.toBody() };
  // An unexpected failure is logged by its class only: its message could quote a header or the body.
  const error = refusal.code === 'postback.internal' ? { error: errorName(refusal.cause) } : {};
  return { answer, code: refusal.code, ...facts, ...error };
}

/** The refusal for a failure: a refusal as it is, the state store's as its own, anything else internal. */
function asRefusal(err: unknown): PostbackRefusal {
  if (err instanceof PostbackRefusal) return err;
  if (err instanceof StateStoreUnavailableError) return postbackRefusals.stateUnavailable(err);
  return postbackRefusals.internal(err);
}

/** True when the source address is allowed (IPv4-mapped IPv6 addresses, from a dual-stack listener, as IPv4). */
export function sourceAllowed(allow: PostbackSourceAllowList | undefined, address: string | undefined): boolean {
  if (allow === undefined) return true;
  if (address === undefined) return false;
  const mapped = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/i.exec(address)?.[1];
  const plain = mapped ?? address;
  const family = isIP(plain);
  return family !== 0 && allow.list.check(plain, family === 6 ? 'ipv6' : 'ipv4');
}

/** On the headers alone: a sender outside the allow-list, another path or method costs no body read. */
function admit(req: IncomingMessage, deps: PostbackHandlerDeps): PostbackRefusal | undefined {
  if (!sourceAllowed(deps.allow, req.socket.remoteAddress)) return postbackRefusals.sourceForbidden();
  const path = (req.url ?? '').split('?', 1)[0];
  if (path !== deps.path) return postbackRefusals.notFound();
  if (req.method !== 'POST') return postbackRefusals.methodNotAllowed();
  return undefined;
}

async function receive(req: IncomingMessage, deps: PostbackHandlerDeps, arrival: Arrival): Promise<Handled> {
  const inadmissible = admit(req, deps);
  if (inadmissible !== undefined) return refused(inadmissible, { bodyRead: false });
  if (deps.overloaded()) {
    deps.onShed();
    return refused(postbackRefusals.overloaded(), { bodyRead: false });
  }
  const reserved = deps.budget.reserveDeclared(req.headers['content-length'], POSTBACK_MAX_BODY_BYTES);
  if (reserved === undefined) return refused(postbackRefusals.busy(), { bodyRead: false });
  try {
    const read = await readBoundedBody(req, POSTBACK_MAX_BODY_BYTES);
    if (read.kind === 'too_large') return refused(postbackRefusals.tooLarge(read.limit), { bodyRead: false });
    if (read.kind === 'incomplete') {
      return refused(postbackRefusals.bodyInvalid('the body was not received completely'), { bodyRead: false });
    }
    let verification: Verification;
    try {
      verification = deps.verify(req.headers, read.bytes, Math.floor(deps.nowMs() / 1000));
    } catch (err) {
      return refused(postbackRefusals.internal(err), { bodyRead: true });
    }
    if (verification.kind === 'refused') return refused(verification.refusal, { bodyRead: true });
    return await deliver(deps, verification.postback, arrival);
  } finally {
    deps.budget.release(reserved);
  }
}

/**
 * Records the nonce, then hands the postback to the sink once: the replay memory's claim keeps two copies arriving
 * at once from both being delivered (or appended), and a copy of one delivered already is answered `duplicate`.
 */
async function deliver(deps: PostbackHandlerDeps, postback: VerifiedPostback, arrival: Arrival): Promise<Handled> {
  const { memory } = deps;
  // Owner of the in-flight claim: unique per request (a sender's X-Request-Id may repeat across copies).
  const claimOwner = randomUUID();
  let facts: Facts = { bodyRead: true, postback };
  try {
    if (postback.nonce !== undefined) {
      facts = { ...facts, nonceReplayed: !(await memory.recordNonce(postback.nonce, postback.digest)) };
    }
    const claim = await memory.claim(postback.digest, claimOwner);
    if (claim.kind === 'delivered') return taken('duplicate', facts);
    if (claim.kind === 'in_flight') return refused(postbackRefusals.inProgress(), facts);
    const release = () => memory.release(postback.digest, claimOwner).catch(() => undefined); // its TTL frees it too
    const handed = await deps.sink.hand(postback, arrival).catch(async (err: unknown) => {
      await release();
      throw err;
    });
    facts = { ...facts, delivery: handed.report };
    if (handed.kind === 'refused') {
      await release();
      return refused(handed.refusal, facts);
    }
    await remember(deps, arrival, postback, claimOwner);
    return taken(handed.outcome, facts);
  } catch (err) {
    return refused(asRefusal(err), facts);
  }
}

/**
 * Records the postback as delivered (to the application, or kept in the inbox). A failure is only logged: the
 * postback is delivered or kept all the same, and a 503 would make the gateway send it again; only a redelivery
 * that the gateway makes anyway could now go through twice, and the log line says so.
 */
async function remember(
  deps: PostbackHandlerDeps,
  arrival: Arrival,
  postback: VerifiedPostback,
  claimOwner: string,
): Promise<void> {
  try {
    await deps.memory.delivered(postback.digest, claimOwner);
  } catch (err) {
    deps.log.warn(
      { event: 'postback.memory_failed', requestId: arrival.requestId, err: errorName(err) },
      'not remembered',
    );
  }
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

function logLine(deps: PostbackHandlerDeps, handled: Handled, arrival: Arrival, ms: number): void {
  const { answer, postback, delivery } = handled;
  const fields = {
    event: 'postback',
    outcome: answer.outcome,
    requestId: arrival.requestId,
    status: answer.status,
    code: handled.code,
    verified: postback?.verified,
    nonce: postback?.nonce,
    nonceReplayed: handled.nonceReplayed,
    payloadDigest: postback?.digest,
    postbackId: delivery?.postbackId,
    internalStatus: delivery?.applicationStatus,
    forwardFailure: delivery?.deliveryFailure,
    error: handled.error,
    durationMs: Math.round(ms),
    traceId: arrival.trace?.traceId,
    spanId: arrival.trace?.spanId,
  };
  if (answer.status < 300) deps.log.info(fields, 'postback');
  else deps.log.warn(fields, 'postback refused');
}

export function createPostbackHandler(deps: PostbackHandlerDeps) {
  return async (req: IncomingMessage, res: ServerResponse): Promise<void> => {
    const started = performance.now();
    const id = requestId(req.headers['x-request-id']);
    const span = receiveSpan(deps, req, id);
    const arrival: Arrival = { requestId: id, trace: span?.context, stopping: deps.stopping };
    const handled = await receive(req, deps, arrival).catch((err: unknown) =>
      refused(postbackRefusals.internal(err), { bodyRead: false }),
    );
    const { answer, code } = handled;
    respond(req, res, answer, id, handled.bodyRead);
    deps.metrics.postback(answer.outcome);
    logLine(deps, handled, arrival, performance.now() - started);
    if (span !== undefined) {
      span.setAttributes({
        'http.response.status_code': answer.status,
        'sidecar.postback.outcome': answer.outcome,
        'sidecar.code': code,
        'sidecar.postback.verified': handled.postback?.verified,
        'sidecar.postback.forward_status': handled.delivery?.applicationStatus,
      });
      if (answer.status >= 500) span.fail(code);
      span.end();
    }
  };
}
