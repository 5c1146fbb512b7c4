import type { IncomingMessage, OutgoingHttpHeaders, ServerResponse } from 'node:http';
import { asSidecarError, sidecarErrors, type SidecarError } from '../errors.js';
import type { Logger } from '../observability/log.js';
import type { SidecarMetrics } from '../observability/metrics.js';
import { isJsonContentType, readBody } from './body.js';
import { wrapEnvelope } from './envelope.js';
import { errorCode } from '../upstream/forwarder.js';
import { errorLabel } from './gateway-answer.js';
import { forwardableRequestHeaders, forwardableResponseHeaders } from './headers.js';
import { requestId, type RequestId } from './request-id.js';
import { logRequest, logVerifyFailure, type RequestOutcome } from './request-log.js';
import { UNMATCHED_ROUTE, type RouteMatch } from './routes.js';
import { sendSigned, type SignedSendDeps } from './signed-send.js';

export interface HandlerDeps extends SignedSendDeps {
  readonly route: (method: string, requestTarget: string) => RouteMatch;
  readonly maxBodyBytes: number;
  readonly log: Logger;
  readonly metrics: SidecarMetrics;
}

/** Turns one client request into exactly one definitive answer: the gateway's, or a sidecar.* error. */
export function createProxyHandler(deps: HandlerDeps) {
  return (req: IncomingMessage, res: ServerResponse): void => {
    serve(deps, req, res).catch((err: unknown) => deps.log.error({ event: 'handler.bug', ...describeBug(err) }, 'request accounting failed'));
  };
}

async function serve(deps: HandlerDeps, req: IncomingMessage, res: ServerResponse): Promise<void> {
  const started = performance.now();
  const id = requestId(req.headers['x-request-id']);
  tagWithRequestId(res, id);
  const match = deps.route(req.method ?? '', req.url ?? '/');
  let outcome: RequestOutcome;
  try {
    outcome = await handle(deps, req, res, match, id);
  } catch (err) {
    outcome = fail(deps, req, res, asSidecarError(err));
  }
  // Shutdown may have answered first (504 outcome_unknown): the log line and the metrics say what the client got,
  // and the line keeps what the handler saw afterwards, for reconciliation.
  const answered = (res as TaggedResponse)[ERROR_ANSWER];
  if (answered && (answered.status !== outcome.status || answered.code !== outcome.code)) {
    outcome = { ...outcome, status: answered.status, code: answered.code, late: { status: outcome.status, code: outcome.code } };
  }
  const durationMs = performance.now() - started;
  const route = match.kind === 'not_found' ? UNMATCHED_ROUTE : match.route;
  deps.metrics.requestDone(route, outcome.status, outcome.code, durationMs / 1000);
  logRequest(deps.log, id, route, durationMs, outcome);
}

async function handle(deps: HandlerDeps, req: IncomingMessage, res: ServerResponse, match: RouteMatch, id: RequestId): Promise<RequestOutcome> {
  if (match.kind === 'not_found') throw sidecarErrors.routeNotFound();
  if (match.kind === 'method_not_allowed') {
    res.setHeader('allow', 'POST');
    throw sidecarErrors.methodNotAllowed('POST');
  }
  if (!isJsonContentType(req.headers['content-type'])) throw sidecarErrors.unsupportedMediaType();
  const body = await readBody(req, deps.maxBodyBytes);
  const envelope = wrapEnvelope(body);
  const progress = { sent: 0 };
  const headers = forwardableRequestHeaders(req.headers);
  headers['x-request-id'] = id;
  try {
    const result = await sendSigned(deps, { route: match.route, target: match.target, envelope, headers, progress });
    if (result.gatewayCode === 'signature.verify.failed') logVerifyFailure(deps.log, id, result, envelope.data);
    const { response } = result;
    answerOnce(res, response.status, forwardableResponseHeaders(response.headers), response.body);
    const code = errorLabel(response.status, result.gatewayCode) ?? 'ok';
    return { status: response.status, code, gatewayCode: result.gatewayCode?.slice(0, 100), attempts: result.attempts, payload: body };
  } catch (err) {
    const error = asSidecarError(err);
    writeSidecarError(res, error);
    return { status: error.status, code: error.code, attempts: progress.sent, causeCode: errorCode(error.cause), payload: body };
  }
}

function fail(deps: HandlerDeps, req: IncomingMessage, res: ServerResponse, error: SidecarError): RequestOutcome {
  if (error.code === 'sidecar.internal') deps.log.error({ event: 'handler.error', ...describeBug(error.cause) }, 'unexpected error');
  // A refused body may still be arriving: close the connection after answering rather than read it all.
  if (!req.complete && !res.headersSent) res.setHeader('connection', 'close');
  writeSidecarError(res, error);
  return { status: error.status, code: error.code, attempts: 0 };
}

/**
 * A bug report without the error's message: messages of parsers and libraries can quote the values they
 * choked on, which may be payload or secrets. The name, code and call stack locate the bug well enough.
 */
function describeBug(cause: unknown): Record<string, string | undefined> {
  if (!(cause instanceof Error)) return { errorType: typeof cause };
  const frames = cause.stack?.split('\n').filter((line) => line.trimStart().startsWith('at ')).slice(0, 8).join('\n');
  return { errorName: cause.name, errorCode: errorCode(cause), stack: frames };
}

const REQUEST_ID = Symbol('x-request-id');
const ERROR_ANSWER = Symbol('sidecar error answer');
type TaggedResponse = ServerResponse & { [REQUEST_ID]?: string; [ERROR_ANSWER]?: { status: number; code: string } };

/**
 * The id goes on every answer, including the one shutdown writes for a request it cuts short. It is kept on the
 * response rather than set with setHeader, which would send every writeHead down Node's slower merging path.
 */
function tagWithRequestId(res: ServerResponse, id: string): void {
  (res as TaggedResponse)[REQUEST_ID] = id;
}

/**
 * The one place that answers a client. A client gets exactly one answer: if shutdown already answered it
 * (outcome_unknown), the late gateway answer is dropped; a half-written answer is cut rather than corrupted.
 */
function answerOnce(res: ServerResponse, status: number, headers: OutgoingHttpHeaders, body: Buffer | string): void {
  if (res.headersSent) {
    if (!res.writableEnded) res.destroy();
    return;
  }
  const id = (res as TaggedResponse)[REQUEST_ID];
  if (id !== undefined) headers['x-request-id'] = id; // the sidecar's id wins over any the gateway sent
  // The whole body is in hand: without a length, writeHead (called before end) would make Node send it chunked.
  // 204 and 304 answers carry no body and must not carry a length either (RFC 9110 8.6).
  if (status !== 204 && status !== 304) headers['content-length'] = typeof body === 'string' ? Buffer.byteLength(body) : body.length;
  res.writeHead(status, headers);
  res.end(body);
}

export function writeSidecarError(res: ServerResponse, error: SidecarError): void {
  const body = JSON.stringify(error.toBody());
  if (!res.headersSent) (res as TaggedResponse)[ERROR_ANSWER] = { status: error.status, code: error.code };
  answerOnce(res, error.status, { 'content-type': 'application/json' }, body);
}
