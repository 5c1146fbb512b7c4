import { SimError } from './errors.js';
/** Payload size is not in the spec; 1 MiB is far above any real deposit and keeps a stray upload harmless. */
export const MAX_BODY_BYTES = 1024 * 1024;
export function readBody(req, limit = MAX_BODY_BYTES) {
    const declared = Number(req.headers['content-length'] ?? '0');
    if (declared > limit)
        return Promise.reject(tooLarge(limit));
    return new Promise((resolve, reject) => {
        const chunks = [];
        let size = 0;
        const onData = (chunk) => {
            size += chunk.length;
            if (size > limit) {
                req.off('data', onData);
                // Keep draining so the client can finish writing and read our 413 instead of a broken pipe.
                req.resume();
                reject(tooLarge(limit));
                return;
            }
            chunks.push(chunk);
        };
        req.on('data', onData);
        req.once('end', () => resolve(Buffer.concat(chunks)));
        req.once('error', reject);
    });
}
function tooLarge(limit) {
    return new SimError(413, 'request.body.too_large', `request body exceeds ${limit} bytes`, {}, { connection: 'close' });
}
export function sendJson(res, clock, status, body, headers = {}) {
    if (res.headersSent || res.destroyed)
        return;
    const text = JSON.stringify(body);
    res.sendDate = false;
    res.writeHead(status, {
        ...headers,
        date: new Date(clock.nowMs()).toUTCString(),
        'content-type': 'application/json; charset=utf-8',
        'content-length': Buffer.byteLength(text),
        'cache-control': 'no-store',
    });
    res.end(text);
}
export function sendError(res, clock, err) {
    sendJson(res, clock, err.status, err.toBody(), err.headers);
}
/** `application/json`, optionally with parameters (`; charset=utf-8`); anything else is refused with 415. */
export function requireJsonContentType(req) {
    const value = req.headers['content-type'];
    const mediaType = value?.split(';')[0]?.trim().toLowerCase();
    if (mediaType !== 'application/json') {
        throw new SimError(415, 'request.content_type.invalid', `Content-Type must be application/json, got ${value === undefined ? 'none' : JSON.stringify(value)}`);
    }
}
/** Parses a JSON object body or throws a 400 naming the problem. */
export function parseJsonObject(body, code = 'request.body.invalid_json', what = 'request body') {
    let value;
    try {
        value = JSON.parse(new TextDecoder('utf-8', { fatal: true }).decode(body));
    }
    catch {
        throw new SimError(400, code, `${what} is not valid UTF-8 JSON`);
    }
    if (typeof value !== 'object' || value === null || Array.isArray(value)) {
        throw new SimError(400, code, `${what} must be a JSON object`);
    }
    return value;
}
