import { sidecarErrors } from '../errors.js';
const JSON_MEDIA_TYPE = /^application\/json\s*(;|$)/i;
export function isJsonContentType(value) {
    return value !== undefined && JSON_MEDIA_TYPE.test(value.trim());
}
/**
 * Reads the whole body, refusing more than `limit` bytes as early as possible (a declared Content-Length
 * over the limit is refused before a byte is read). The exact bytes are kept: they are what gets signed.
 */
export function readBody(req, limit) {
    const declared = Number(req.headers['content-length']);
    if (Number.isFinite(declared) && declared > limit)
        return Promise.reject(sidecarErrors.tooLarge(limit));
    return new Promise((resolve, reject) => {
        const chunks = [];
        let size = 0;
        const onData = (chunk) => {
            size += chunk.length;
            if (size > limit) {
                cleanup();
                req.resume(); // keep draining so the 413 can be written; the connection is closed after it
                reject(sidecarErrors.tooLarge(limit));
                return;
            }
            chunks.push(chunk);
        };
        const onEnd = () => {
            cleanup();
            resolve(Buffer.concat(chunks, size));
        };
        const onAborted = () => {
            cleanup();
            reject(sidecarErrors.bodyIncomplete());
        };
        const cleanup = () => {
            req.off('data', onData);
            req.off('end', onEnd);
            req.off('error', onAborted);
            req.off('aborted', onAborted);
        };
        req.on('data', onData);
        req.on('end', onEnd);
        req.on('error', onAborted);
        req.on('aborted', onAborted);
    });
}
