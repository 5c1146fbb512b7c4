// What every listener of the sidecar does with an inbound HTTP request, whatever it serves (the egress proxy, the
// postback receiver): listen, name the request, and end an early answer without losing it.
import { randomUUID } from 'node:crypto';
import type { IncomingMessage, Server, ServerResponse } from 'node:http';

/** Listens on host:port (0: any free port); resolves with the server's http:// URL, the address it really got. */
export function listen(server: Server, host: string, port: number): Promise<string> {
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => {
      server.off('error', reject);
      const address = server.address();
      if (address === null || typeof address === 'string') return reject(new Error('no TCP address'));
      const hostPart = address.family === 'IPv6' ? `[${address.address}]` : address.address;
      resolve(`http://${hostPart}:${address.port}`);
    });
  });
}

const SAFE_ID = /^[A-Za-z0-9._:-]{1,128}$/;

/**
 * A request id that is safe to log and to echo in a header: only letters, digits and `._:-`. The brand means it
 * went through requestId(); create one only there.
 */
export type RequestId = string & { readonly __brand: 'RequestId' };

/** The client's X-Request-Id when it is a sane token (it is logged and echoed), else a fresh UUID. */
export function requestId(header: string | string[] | undefined): RequestId {
  const value = Array.isArray(header) ? header[0] : header;
  return (value !== undefined && SAFE_ID.test(value) ? value : randomUUID()) as RequestId;
}

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
