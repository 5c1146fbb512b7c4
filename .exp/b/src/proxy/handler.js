import { asSidecarError, sidecarErrors } from '../errors.js';
import { isJsonContentType, readBody } from './body.js';
import { wrapEnvelope } from './envelope.js';
import { errorLabel } from './gateway-answer.js';
import { forwardableRequestHeaders, forwardableResponseHeaders } from './headers.js';
import { requestId } from './request-id.js';
import { logRequest, logVerifyFailure, sha256Hex } from './request-log.js';
import { UNMATCHED_ROUTE } from './routes.js';
import { sendSigned } from './signed-send.js';
/** Turns one client request into exactly one definitive answer: the gateway's, or a sidecar.* error. */
export function createProxyHandler(deps) {
    return (req, res) => {
        const started = performance.now();
        const id = requestId(req.headers['x-request-id']);
        res.setHeader('x-request-id', id);
        const match = deps.route(req.method ?? '', req.url ?? '/');
        const route = match.kind === 'not_found' ? UNMATCHED_ROUTE : match.route;
        deps.metrics.inFlight(1);
        handle(deps, req, res, match, id)
            .catch((err) => fail(deps, req, res, asSidecarError(err)))
            .then((outcome) => {
            const durationMs = performance.now() - started;
            deps.metrics.requestDone(route, outcome.status, outcome.code, durationMs / 1000);
            logRequest(deps.log, { requestId: id, route, durationMs: Math.round(durationMs * 1000) / 1000, ...outcome });
        })
            .catch((err) => deps.log.error({ event: 'handler.bug', err }, 'request accounting failed'))
            .finally(() => deps.metrics.inFlight(-1));
    };
}
async function handle(deps, req, res, match, id) {
    if (match.kind === 'not_found')
        throw sidecarErrors.routeNotFound();
    if (match.kind === 'method_not_allowed') {
        res.setHeader('allow', 'POST');
        throw sidecarErrors.methodNotAllowed('POST');
    }
    if (!isJsonContentType(req.headers['content-type']))
        throw sidecarErrors.unsupportedMediaType();
    const body = await readBody(req, deps.maxBodyBytes);
    const envelope = wrapEnvelope(body);
    const payload = { payloadBytes: body.length, payloadSha256: sha256Hex(body) };
    try {
        const result = await sendSigned(deps, {
            route: match.route,
            target: match.target,
            envelope,
            headers: { ...forwardableRequestHeaders(req.headers), 'x-request-id': id },
        });
        if (result.gatewayCode === 'signature.verify.failed')
            logVerifyFailure(deps.log, id, result, envelope.data);
        const { response } = result;
        res.writeHead(response.status, { ...forwardableResponseHeaders(response.headers), 'x-request-id': id });
        res.end(response.body);
        const code = errorLabel(response.status, result.gatewayCode) ?? 'ok';
        const gatewayCode = result.gatewayCode?.slice(0, 100);
        return { status: response.status, code, ...(gatewayCode ? { gatewayCode } : {}), attempts: result.attempts, ...payload };
    }
    catch (err) {
        const error = asSidecarError(err);
        writeError(res, error);
        return { status: error.status, code: error.code, attempts: 0, ...payload };
    }
}
function fail(deps, req, res, error) {
    if (error.code === 'sidecar.internal')
        deps.log.error({ event: 'handler.error', err: error.cause }, 'unexpected error');
    // A refused body may still be arriving: close the connection after answering rather than read it all.
    if (!req.complete)
        res.setHeader('connection', 'close');
    writeError(res, error);
    return { status: error.status, code: error.code, attempts: 0 };
}
function writeError(res, error) {
    if (res.headersSent) {
        res.destroy();
        return;
    }
    const body = JSON.stringify(error.toBody());
    res.writeHead(error.status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) });
    res.end(body);
}
