import type { IncomingMessage } from 'node:http';
import { sidecarErrors } from '../errors.js';

const JSON_MEDIA_TYPE = /^application\/json\s*(;|$)/i;
const CHARSET_PARAMETER = /;\s*charset\s*=\s*"?([^";\s]*)"?/i;

/**
 * application/json, with no charset or charset=utf-8 (RFC 8259 8.1: JSON exchanged between systems is UTF-8).
 * Another charset is refused rather than read as UTF-8: the bytes are signed as they are.
 */
export function isJsonContentType(value: string | undefined): boolean {
  if (value === undefined || !JSON_MEDIA_TYPE.test(value.trim())) return false;
  const charset = CHARSET_PARAMETER.exec(value)?.[1];
  return charset === undefined || /^utf-?8$/i.test(charset);
}

/**
 * Reads the whole body, refusing more than `limit` bytes as early as possible (a declared Content-Length
 * over the limit is refused before a byte is read). The exact bytes are kept: they are what gets signed.
 */
export function readBody(req: IncomingMessage, limit: number): Promise<Buffer> {
  const declared = Number(req.headers['content-length']);
  if (Number.isFinite(declared) && declared > limit) return Promise.reject(sidecarErrors.tooLarge(limit));
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    const onData = (chunk: Buffer) => {
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
    // A connection destroyed mid-body (by the client, or by shutdown after answering) may signal nothing on the
    // request itself: Node discards an unread body once its response has ended. The socket's close is certain.
    const onClose = () => {
      if (!req.complete) onAborted();
    };
    const socket = req.socket;
    const cleanup = () => {
      req.off('data', onData);
      req.off('end', onEnd);
      req.off('error', onAborted);
      req.off('aborted', onAborted);
      socket.off('close', onClose);
    };
    req.on('data', onData);
    req.on('end', onEnd);
    req.on('error', onAborted);
    req.on('aborted', onAborted);
    socket.on('close', onClose);
  });
}
