import type { IncomingMessage, OutgoingHttpHeaders, ServerResponse } from 'node:http';
import { asSidecarError, sidecarErrors, type SidecarError } from '../errors.js';
import type { Logger } from '../observability/log.js';
import type { SidecarMetrics } from '../observability/metrics.js';
import { isJsonContentType, readBody } from './body.js';
import { wrapEnvelope } from './envelope.js';
import { errorCode } from '../upstream/forwarder.js';
import { errorLabel } from './gateway-answer.js';
import { forwardableRequestHeaders, forwardableResponseHeaders } from './headers.js';
import { requestId } from './request-id.js';
import { logRequest, logVerifyFailure } from './request-log.js';
import { UNMATCHED_ROUTE, type RouteMatch } from './routes.js';
import { sendSigned, type SignedSendDeps } from './signed-send.js';

export interface HandlerDeps extends SignedSendDeps {
  readonly route: (method: string, requestTarget: string) => RouteMatch;
  readonly maxBodyBytes: number;
  readonly log: Logger;
  /** Logger for the one line per request; see createRequestLogger. */
  readonly requestLog: Logger;
  readonly metrics: SidecarMetrics;
}

interface Outcome {
  status: number;
  /** Metric label: ok, a sidecar.* code, or a bounded gateway error label. */
  code: string;
  /** The gateway's own code, for the log line only (unbounded, so never a label). */
  gatewayCode?: string;
  /** Copies of the request that reached (or may have reached) the gateway: 0 means certainly none. */
  attempts: number;
  /** The network error code behind unreachable / outcome_unknown (never the error's message). */
  causeCode?: string;
  payload?: Buffer;
}

/** Turns one client request into exactly one definitive answer: the gateway's, or a sidecar.* error. */
export function createProxyHandler(deps: HandlerDeps) {
  return (req: IncomingMessage, res: ServerResponse): void => {
    const started = performance.now();
    const id = requestId(req.headers['x-request-id']);
    res.setHeader('x-request-id', id);
    const match = deps.route(req.method ?? '', req.url ?? '/');
    const route = match.kind === 'not_found' ? UNMATCHED_ROUTE : match.route;
    handle(deps, req, res, match, id)
      .catch((err: unknown) => fail(deps, req, res, asSidecarError(err)))
      .then((outcome) => {
        const durationMs = performance.now() - started;
        deps.metrics.requestDone(route, outcome.status, outcome.code, durationMs / 1000);
        logRequest(deps.requestLog, { requestId: id, route, durationMs: Math.round(durationMs * 1000) / 1000, ...outcome });
      })
      .catch((err: unknown) => deps.log.error({ event: 'handler.bug', ...describeBug(err) }, 'request accounting failed'));
  };
}

async function handle(deps: HandlerDeps, req: IncomingMessage, res: ServerResponse, match: RouteMatch, id: string): Promise<Outcome> {
  if (match.kind === 'not_found') throw sidecarErrors.routeNotFound();
  if (match.kind === 'method_not_allowed') {
    res.setHeader('allow', 'POST');
    throw sidecarErrors.methodNotAllowed('POST');
  }
  if (!isJsonContentType(req.headers['content-type'])) throw sidecarErrors.unsupportedMediaType();
  const body = await readBody(req, deps.maxBodyBytes);
  const envelope = wrapEnvelope(body);
  const payload = { payload: body };
  const progress = { sent: 0 };
  try {
    const result = await sendSigned(deps, {
      route: match.route,
      target: match.target,
      envelope,
      headers: { ...forwardableRequestHeaders(req.headers), 'x-request-id': id },
      progress,
    });
    if (result.gatewayCode === 'signature.verify.failed') logVerifyFailure(deps.log, id, result, envelope.data);
    const { response } = result;
    answerOnce(res, response.status, { ...forwardableResponseHeaders(response.headers), 'x-request-id': id }, response.body);
    const code = errorLabel(response.status, result.gatewayCode) ?? 'ok';
    const gatewayCode = result.gatewayCode?.slice(0, 100);
    return { status: response.status, code, ...(gatewayCode ? { gatewayCode } : {}), attempts: result.attempts, ...payload };
  } catch (err) {
    const error = asSidecarError(err);
    writeSidecarError(res, error);
    const causeCode = errorCode(error.cause);
    return { status: error.status, code: error.code, attempts: progress.sent, ...(causeCode ? { causeCode } : {}), ...payload };
  }
}

function fail(deps: HandlerDeps, req: IncomingMessage, res: ServerResponse, error: SidecarError): Outcome {
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

/**
 * The one place that answers a client. A client gets exactly one answer: if shutdown already answered it
 * (outcome_unknown), the late gateway answer is dropped; a half-written answer is cut rather than corrupted.
 */
function answerOnce(res: ServerResponse, status: number, headers: OutgoingHttpHeaders, body: Buffer | string): void {
  if (res.headersSent) {
    if (!res.writableEnded) res.destroy();
    return;
  }
  res.writeHead(status, headers);
  res.end(body);
}

export function writeSidecarError(res: ServerResponse, error: SidecarError): void {
  const body = JSON.stringify(error.toBody());
  answerOnce(res, error.status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) }, body);
}
