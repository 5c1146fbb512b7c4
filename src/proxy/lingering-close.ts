import type { IncomingMessage, ServerResponse } from 'node:http';

/** How long, and how much of a request's unread body, is read and dropped after an early answer before closing. */
export const LINGER_BOUNDS = { ms: 5_000, bytes: 16 * 1024 * 1024 } as const;

/**
 * Ends an answer written while its request's body is still arriving (a 413, or any refusal before the body was
 * read), without losing the answer. Closing at once would leave the rest of the body unread, and the kernel answers
 * unread data on a closed socket with a reset: a client that writes its whole body before it reads (most simple
 * HTTP clients) then gets a broken pipe instead of the answer. So, as servers do with a lingering close, the answer
 * is written now, the rest of the body is read and dropped, and the response ends (Connection: close then closes
 * the connection) once the body is in, the client is gone, or the bounds are reached, whichever comes first: a
 * client that never stops sending is cut after them.
 */
export function endAfterUnreadBody(
  req: IncomingMessage,
  res: ServerResponse,
  body: Buffer | string,
  bounds: { readonly ms: number; readonly bytes: number } = LINGER_BOUNDS,
): void {
  if (req.complete || req.destroyed) {
    res.end(body);
    return;
  }
  res.write(body);
  let dropped = 0;
  const finish = () => {
    clearTimeout(timer);
    req.off('data', onData);
    req.off('end', finish);
    req.off('close', finish);
    if (!res.writableEnded) res.end();
  };
  const onData = (chunk: Buffer) => {
    dropped += chunk.length;
    if (dropped > bounds.bytes) finish();
  };
  const timer = setTimeout(finish, bounds.ms);
  req.on('data', onData);
  req.once('end', finish);
  req.once('close', finish);
  req.resume();
}
