// What Node's HTTP parser is handed of a connection, and when: one request at a time. Node parses every request in a
// chunk it has read (up to 64 KiB) before any handler runs, and makes a request and an answer object for each: one
// chunk of pipelined `GET /metrics` costs 1 to 2.5 MB of heap, held until the connection closes, and 512 connections
// writing one each ran a 64 MiB heap out (docs/operations.md, "Connections"). Between the socket and the parser,
// this stream hands over the next request's header block only once the one before it is answered, and its body
// only up to its declared length: whatever a client pipelines behind a request waits here, unparsed, within a small
// bound, and past it the connection is closed once the request in flight is answered.
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import { Duplex } from 'node:stream';

export interface PacingLimits {
  /** The listener's header limit: a header block is never longer, so no more is handed over in one piece. */
  readonly maxHeaderBytes: number;
  /** Bytes that may wait here behind a request in flight; more is a pipelining flood (the connection then closes). */
  readonly maxWaitingBytes: number;
}

/**
 * A chunked body has no declared length: it is handed over this much at a time, so that requests pipelined behind its
 * end are parsed at most this many bytes' worth at once (a request line is at least 16 bytes).
 */
const CHUNKED_PIECE_BYTES = 1024;

const LF = 0x0a;
const CR = 0x0d;

/** The length of the first header block in `bytes` (up to and including its empty line), or -1 when it is not all in. */
export function headerBlockLength(bytes: Buffer): number {
  // Empty lines before a request line are ignored (RFC 9112 2.2): they belong to the block that follows them.
  let start = 0;
  while (start < bytes.length && (bytes[start] === CR || bytes[start] === LF)) start += 1;
  for (let at = bytes.indexOf(LF, start); at !== -1 && at + 1 < bytes.length; at = bytes.indexOf(LF, at + 1)) {
    // A line ends at LF (llhttp also takes a bare LF); an empty line follows: LF, or CR LF.
    if (bytes[at + 1] === LF) return at + 2;
    if (bytes[at + 1] === CR && at + 2 < bytes.length && bytes[at + 2] === LF) return at + 3;
  }
  return -1;
}

/**
 * One client connection as the HTTP server sees it: a Duplex over the socket that writes straight through and reads
 * one request at a time. The listener's request gate (connection-policy.ts) tells it when a request begins (`begin`),
 * and the answer's 'close' when it is done. Its state is a few fields rather than an object per request: it is on
 * every request's path, and the bench weighs what a request allocates (docs/performance.md).
 */
export class PacedConnection extends Duplex {
  private waiting: Buffer | undefined;
  /** The request being answered, and its answer; undefined between requests. */
  private req: IncomingMessage | undefined;
  private res: ServerResponse | undefined;
  /** Declared body bytes of `req` not handed over yet; undefined for a chunked body (handed over in pieces). */
  private bodyLeft: number | undefined;
  /** The last piece handed over was a whole header block. */
  private gaveHeaderBlock = false;
  /**
   * Nothing more is handed over: a request was pipelined past the bound (the connection ends once the request in
   * flight is answered), or the parser made a request that Node answered itself (a 400), which closes it.
   */
  private closing = false;
  private socketEnded = false;
  private endPushed = false;
  /** One function for every answer of the connection: the answer's 'close' comes after Node's own 'finish' work. */
  private readonly onAnswered = (): void => this.answered();

  constructor(
    readonly socket: Socket,
    private readonly limits: PacingLimits,
    private readonly onPipelined: () => void,
  ) {
    super({ allowHalfOpen: true, decodeStrings: true });
    const received = (chunk: Buffer) => this.received(chunk);
    const ended = () => {
      this.socketEnded = true;
      this.pump();
    };
    const closed = () => this.destroy();
    const failed = (err: Error) => this.destroy(err);
    const timedOut = () => this.emit('timeout');
    socket.on('data', received);
    socket.on('end', ended);
    socket.on('close', closed);
    socket.on('error', failed);
    socket.on('timeout', timedOut);
  }

  get remoteAddress(): string | undefined {
    return this.socket.remoteAddress;
  }
  get remotePort(): number | undefined {
    return this.socket.remotePort;
  }
  get remoteFamily(): string | undefined {
    return this.socket.remoteFamily;
  }
  get localAddress(): string | undefined {
    return this.socket.localAddress;
  }
  get localPort(): number | undefined {
    return this.socket.localPort;
  }

  /** The socket's inactivity timeout (the HTTP server's keep-alive and idle deadlines); its 'timeout' is re-emitted. */
  setTimeout(ms: number, onTimeout?: () => void): this {
    this.socket.setTimeout(ms);
    if (onTimeout !== undefined) this.once('timeout', onTimeout);
    return this;
  }
  setNoDelay(noDelay?: boolean): this {
    this.socket.setNoDelay(noDelay);
    return this;
  }
  setKeepAlive(enable?: boolean, initialDelay?: number): this {
    this.socket.setKeepAlive(enable, initialDelay);
    return this;
  }

  /**
   * Writes are corked on the socket itself, which then sends an answer's head and body in one system call, as it
   * does under Node's own HTTP server, rather than here, where they would wait for each other's callbacks.
   */
  override cork(): void {
    this.socket.cork();
  }
  override uncork(): void {
    this.socket.uncork();
  }

  /** Whether a request is being answered on this connection. */
  get requestInFlight(): boolean {
    return this.req !== undefined;
  }

  /** Whether the answer to the request in flight has begun (a parse error then cuts the connection, unanswered). */
  get answerStarted(): boolean {
    return this.res?.headersSent === true;
  }

  /**
   * The client ended its side before the request in flight was whole: true when its answer has not begun, and then
   * the connection closes once that answer is written (the listener's, which the body reader prompts).
   */
  answersBodyCutShort(): boolean {
    if (this.req === undefined || this.answerStarted) return false;
    this.closing = true;
    this.waiting = undefined;
    return true;
  }

  /**
   * Called by the request gate for each request the parser made: true for the one request in flight; false for one
   * that came while another is answered (pipelined within one piece of a chunked body), never handed to a handler.
   */
  begin(req: IncomingMessage, res: ServerResponse): boolean {
    if (this.req !== undefined) {
      this.refusePipelining();
      return false;
    }
    this.req = req;
    this.res = res;
    this.bodyLeft = declaredBodyLength(req);
    res.once('close', this.onAnswered);
    return true;
  }

  private answered(): void {
    this.req = undefined;
    this.res = undefined;
    if (this.closing) {
      // The answer is written: the connection ends, and what was pipelined behind it is never parsed.
      this.socket.destroySoon();
      return;
    }
    this.pump();
  }

  private refusePipelining(): void {
    if (this.closing) return;
    this.closing = true;
    this.waiting = undefined;
    this.onPipelined();
    if (this.req === undefined) this.socket.destroySoon();
  }

  private received(chunk: Buffer): void {
    if (this.closing) return;
    this.waiting = this.waiting === undefined ? chunk : Buffer.concat([this.waiting, chunk]);
    this.pump();
    const { waiting } = this;
    if (waiting === undefined) return;
    if (this.req?.complete === true && waiting.length > this.limits.maxWaitingBytes) {
      this.refusePipelining();
      return;
    }
    // The server stopped reading (its answer or the body's reader is behind): so does the socket, until _read.
    if (this.readableFlowing === false) this.socket.pause();
    // What waits is a copy: a slice would keep the whole 64 KiB read buffer it came from.
    if (waiting.buffer.byteLength > waiting.length) this.waiting = Buffer.from(waiting);
  }

  /** Hands the parser what it may parse now, while it reads (the server pauses this stream under backpressure). */
  private pump(): void {
    while (this.waiting !== undefined && !this.destroyed && !this.closing && this.readableFlowing !== false) {
      const length = this.nextPieceLength(this.waiting);
      if (length === 0) break;
      const piece = length >= this.waiting.length ? this.waiting : this.waiting.subarray(0, length);
      this.waiting = length >= this.waiting.length ? undefined : this.waiting.subarray(length);
      this.push(piece);
      // A whole header block made no request for the gate: Node answered it itself (400 without Host, say) and
      // closes the connection; nothing behind it is parsed meanwhile.
      if (this.gaveHeaderBlock && this.req === undefined) {
        this.closing = true;
        this.waiting = undefined;
      }
    }
    if (this.socketEnded && this.waiting === undefined && !this.endPushed) {
      this.endPushed = true;
      this.push(null);
    }
  }

  /**
   * How many of the waiting bytes the parser may have now: the next header block when no request is in flight; of
   * the request in flight, the rest of its body; none while a request it has whole is being answered.
   */
  private nextPieceLength(waiting: Buffer): number {
    this.gaveHeaderBlock = false;
    if (this.req === undefined) {
      const block = headerBlockLength(waiting);
      // A header block not all in yet goes to the parser as it comes, which enforces its size and deadline.
      if (block === -1) return Math.min(waiting.length, this.limits.maxHeaderBytes + 1);
      this.gaveHeaderBlock = true;
      return block;
    }
    if (this.req.complete) return 0;
    if (this.bodyLeft === undefined || this.bodyLeft === 0) return Math.min(waiting.length, CHUNKED_PIECE_BYTES);
    const length = Math.min(waiting.length, this.bodyLeft);
    this.bodyLeft -= length;
    return length;
  }

  override _read(): void {
    this.pump();
    this.socket.resume();
  }

  /**
   * Done once the socket has taken the bytes (into its buffer, or the kernel's), as `write` returning true says:
   * under backpressure, once the socket drains. The socket's own flush is its business; its errors destroy this.
   */
  override _write(chunk: Buffer, _encoding: BufferEncoding, callback: (error?: Error | null) => void): void {
    if (this.socket.write(chunk)) callback();
    else this.socket.once('drain', () => callback());
  }

  override _final(callback: (error?: Error | null) => void): void {
    this.socket.end(callback);
  }

  override _destroy(error: Error | null, callback: (error?: Error | null) => void): void {
    this.socket.destroy(error ?? undefined);
    callback(error);
  }
}

/** The body length the parser will read: its Content-Length, or undefined for a chunked body (no length declared). */
function declaredBodyLength(req: IncomingMessage): number | undefined {
  if (req.headers['transfer-encoding'] !== undefined) return undefined;
  const declared = Number(req.headers['content-length'] ?? 0);
  return Number.isSafeInteger(declared) && declared >= 0 ? declared : undefined;
}
