// Reading a request's whole body within a limit, for every listener. What happened is reported as a value; each
// listener answers it with its own code.
import type { IncomingMessage } from 'node:http';

export type BodyRead =
  /** The exact bytes received, whole. */
  | { readonly kind: 'read'; readonly bytes: Buffer }
  /** Over the limit, declared or counted: the rest is drained so that the listener's answer can be written. */
  | { readonly kind: 'too_large'; readonly limit: number }
  /** The connection ended, failed or was half-closed by the client before the whole body arrived. */
  | { readonly kind: 'incomplete' };

/**
 * Reads the whole body, stopping at more than `limit` bytes as early as possible (a declared Content-Length over
 * the limit is refused before a byte is read). The exact bytes are kept: they are what gets signed or verified.
 */
export function readBoundedBody(req: IncomingMessage, limit: number): Promise<BodyRead> {
  const declared = Number(req.headers['content-length']);
  if (Number.isFinite(declared) && declared > limit) return Promise.resolve({ kind: 'too_large', limit });
  if (req.socket.readableEnded && !req.complete) return Promise.resolve({ kind: 'incomplete' });
  return new Promise((resolve) => {
    const chunks: Buffer[] = [];
    let size = 0;
    const onData = (chunk: Buffer) => {
      size += chunk.length;
      if (size > limit) {
        cleanup();
        req.resume(); // keep draining so the 413 can be written; the connection is closed after it
        resolve({ kind: 'too_large', limit });
        return;
      }
      chunks.push(chunk);
    };
    const onEnd = () => {
      cleanup();
      resolve({ kind: 'read', bytes: Buffer.concat(chunks, size) });
    };
    const onAborted = () => {
      cleanup();
      resolve({ kind: 'incomplete' });
    };
    // A connection destroyed mid-body (by the client, or by shutdown after answering) may signal nothing on the
    // request itself: Node discards an unread body once its response has ended. The socket's close is certain.
    // A client that half-closed mid-body (its end before the declared length) signals nothing on the request
    // either, but can still read an answer: the socket's end says so, and the listener answers it (the connection
    // policy leaves that answer to the listener and closes the connection after it).
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
      socket.off('end', onClose);
    };
    req.on('data', onData);
    req.on('end', onEnd);
    req.on('error', onAborted);
    req.on('aborted', onAborted);
    socket.on('close', onClose);
    socket.on('end', onClose);
  });
}
