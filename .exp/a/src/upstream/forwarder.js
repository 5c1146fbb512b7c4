import { rootCertificates } from 'node:tls';
import { Pool } from 'undici';
const DEFAULT_MAX_RESPONSE_BYTES = 8 * 1024 * 1024;
export class ResponseTimeoutError extends Error {
    name = 'ResponseTimeoutError';
}
/** A keep-alive pool to the one configured origin; nothing else is ever reachable through it. */
export function createForwarder(base, options) {
    const pool = new Pool(base.origin, {
        connections: options.connections,
        pipelining: 1,
        connect: {
            timeout: options.connectTimeoutMs,
            // Node's `ca` replaces the system roots, so the extra bundle is added to them rather than used alone.
            ...(options.ca === undefined ? {} : { ca: [...rootCertificates, options.ca] }),
        },
        headersTimeout: options.responseTimeoutMs,
        bodyTimeout: options.responseTimeoutMs,
    });
    const maxBytes = options.maxResponseBytes ?? DEFAULT_MAX_RESPONSE_BYTES;
    return {
        send: (request) => sendOnce(pool, request, options.responseTimeoutMs, maxBytes),
        close: () => pool.close(),
    };
}
function sendOnce(pool, request, timeoutMs, maxBytes) {
    return new Promise((resolve) => {
        let started = false;
        let status = 0;
        let headers = {};
        const chunks = [];
        let size = 0;
        let timer;
        const settle = (outcome) => {
            clearTimeout(timer);
            resolve(outcome);
        };
        const handler = {
            // Called by undici on a connected socket right before the first byte is written (client-h1 writeH1).
            onRequestStart(controller) {
                started = true;
                timer = setTimeout(() => controller.abort(new ResponseTimeoutError('gateway did not answer in time')), timeoutMs);
            },
            onResponseStart(_controller, statusCode, responseHeaders) {
                status = statusCode;
                headers = normaliseHeaders(responseHeaders);
            },
            onResponseData(controller, chunk) {
                size += chunk.length;
                if (size > maxBytes)
                    controller.abort(new Error(`gateway response exceeds ${maxBytes} bytes`));
                else
                    chunks.push(chunk);
            },
            onResponseEnd() {
                settle({ kind: 'response', response: { status, headers, body: Buffer.concat(chunks, size) } });
            },
            onResponseError(_controller, error) {
                if (!started)
                    settle({ kind: 'not_sent', error });
                else
                    settle({ kind: 'sent_no_answer', error, timedOut: isTimeout(error) });
            },
        };
        pool.dispatch({ method: 'POST', path: request.path, headers: request.headers, body: request.body, idempotent: false }, handler);
    });
}
function isTimeout(error) {
    const code = error.code;
    return (error instanceof ResponseTimeoutError || code === 'UND_ERR_HEADERS_TIMEOUT' || code === 'UND_ERR_BODY_TIMEOUT');
}
function normaliseHeaders(raw) {
    const out = {};
    for (const [name, value] of Object.entries(raw))
        if (value !== undefined)
            out[name] = value;
    return out;
}
