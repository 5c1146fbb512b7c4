// Writing a request's one answer, the same for every listener: its length, and an end that does not lose it to a
// reset when the request's body is still arriving.
import type { IncomingMessage, OutgoingHttpHeaders, ServerResponse } from 'node:http';
import { httpDate } from '../time/utc-time.js';

/** An answer whose whole body is in hand. */
export interface Answer {
  readonly status: number;
  /**
   * Every header but Content-Length, which is the body's: writeAnswer adds it (and Date) to this object, which must
   * be made for this answer (not kept elsewhere, as an idempotency record's headers are).
   */
  readonly headers: OutgoingHttpHeaders;
  readonly body: Buffer | string;
}

/**
 * How the answer ends: `after-unread-body` reads and drops what is left of the request's body first (within
 * LINGER_BOUNDS) so that a client writing its whole body before it reads still gets the answer; `now` ends it at
 * once (a connection about to be closed anyway, or a sender not trusted with the linger).
 */
export type AnswerEnding = 'after-unread-body' | 'now';

/**
 * Writes the answer; a half-written one (headers already sent) is cut rather than corrupted. The body is in hand:
 * without a length, writeHead (called before end) would make Node send it chunked. 204 and 304 answers carry no
 * body and must not carry a length either (RFC 9110 8.6).
 */
export function writeAnswer(req: IncomingMessage, res: ServerResponse, answer: Answer, ending: AnswerEnding): void {
  if (res.headersSent) {
    if (!res.writableEnded) res.destroy();
    return;
  }
  const { status, headers, body } = answer;
  if (status !== 204 && status !== 304) headers['content-length'] = Buffer.byteLength(body);
  // Ours (src/time/utc-time.ts), unless the answer has one: a gateway answer passed on keeps the gateway's.
  headers.date ??= httpDate();
  res.sendDate = false;
  res.writeHead(status, headers);
  if (ending === 'after-unread-body') endAfterUnreadBody(req, res, body);
  else res.end(body);
}

/**
 * A server's 'checkExpectation' listener. Without one, Node answers a request whose Expect is not 100-continue with
 * a bare 417 of its own, whose Date it makes with toUTCString (src/time/utc-time.ts says why the sidecar does not): this
 * is the same answer, with the sidecar's Date.
 */
export function answerUnmetExpectation(req: IncomingMessage, res: ServerResponse): void {
  writeAnswer(req, res, { status: 417, headers: {}, body: '' }, 'after-unread-body');
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
function endAfterUnreadBody(
  req: IncomingMessage,
  res: ServerResponse,
  body: Buffer | string,
  bounds: { readonly ms: number; readonly bytes: number } = LINGER_BOUNDS,
): void {
  // Nothing left to read: the body is in, the request is gone, or the client half-closed (no more of it can come).
  if (req.complete || req.destroyed || req.socket.readableEnded) {
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
