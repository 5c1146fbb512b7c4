import type { Socket } from 'node:net';
import { Duplex } from 'node:stream';
import { MAX_HEAD_BYTES } from './gateway-send.js';

const CONTINUE_START = Buffer.from('HTTP/1.1 100 ', 'latin1');
const HEAD_END = Buffer.from('\r\n\r\n', 'latin1');
/** Nothing held: one empty Buffer for every connection, not a new one per answer. */
const NOTHING = Buffer.alloc(0);
const CR = 0x0d;
const LF = 0x0a;

/**
 * RFC 9110 15.2: a client must skip 1xx answers before the final one, even unrequested. undici hands 103 and the
 * like to the dispatch handler, but destroys the connection on an unsolicited `100 Continue` before any handler
 * sees it (nodejs/undici#197), which would turn an answer on its way into outcome_unknown. This wrapper sits
 * between undici and the socket and drops a complete, CRLF-terminated `HTTP/1.1 100` head found at the start of
 * an answer. Nothing else is read here: any other byte, and anything that only looks like a 100 head (bare LF,
 * no end within MAX_HEAD_BYTES), goes to undici's parser (llhttp) unchanged, to be accepted or refused there.
 */
export class InterimContinueFilter extends Duplex {
  /** True from the moment a request is written until the first byte of its answer that is not a 100 head. */
  private atAnswerStart = false;
  private held: Buffer = NOTHING;

  constructor(private readonly socket: Socket) {
    // Strings (undici writes each head as latin1 text) go to the socket as they are, which encodes them on its
    // way to the kernel: decoding them to Buffers here first would cost a copy per write.
    super({ allowHalfOpen: false, decodeStrings: false });
    socket.on('data', (chunk: Buffer) => this.inbound(chunk));
    socket.on('end', () => {
      this.pass(this.held);
      this.push(null);
    });
    socket.on('error', (error) => this.destroy(error));
    socket.on('close', () => this.destroy());
  }

  override _write(chunk: Buffer | string, encoding: BufferEncoding, callback: (error?: Error | null) => void): void {
    // undici writes a request only once the previous answer is complete (no pipelining): what comes next starts
    // this request's answer.
    this.atAnswerStart = true;
    this.socket.write(chunk, encoding, callback);
  }

  /**
   * undici corks the connection around a request's head and body; they arrive here together and leave together,
   * in one write to the kernel (writev), as they would without this wrapper, rather than one write each.
   */
  override _writev(
    chunks: Array<{ chunk: Buffer | string; encoding: BufferEncoding }>,
    callback: (error?: Error | null) => void,
  ): void {
    this.atAnswerStart = true;
    this.socket.cork();
    // The socket finishes its writes in order: the last one's callback stands for all of them.
    let written = 0;
    for (const { chunk, encoding } of chunks)
      this.socket.write(chunk, encoding, ++written === chunks.length ? callback : undefined);
    this.socket.uncork();
  }

  override _final(callback: (error?: Error | null) => void): void {
    this.socket.end(callback);
  }

  override _read(): void {
    this.socket.resume();
  }

  override _destroy(error: Error | null, callback: (error?: Error | null) => void): void {
    this.socket.destroy(error ?? undefined);
    callback(error);
  }

  // The socket methods undici calls on the connection it is given.
  setKeepAlive(enable?: boolean, initialDelay?: number): this {
    this.socket.setKeepAlive(enable, initialDelay);
    return this;
  }

  setNoDelay(noDelay?: boolean): this {
    this.socket.setNoDelay(noDelay);
    return this;
  }

  ref(): this {
    this.socket.ref();
    return this;
  }

  unref(): this {
    this.socket.unref();
    return this;
  }

  private inbound(chunk: Buffer): void {
    if (!this.atAnswerStart) return this.pass(chunk);
    const bytes = this.held.length === 0 ? chunk : Buffer.concat([this.held, chunk]);
    this.held = NOTHING;
    const decided = Math.min(bytes.length, CONTINUE_START.length);
    // Compared in place: subarrays would be two Buffer objects per answer.
    const mayBeContinue = bytes.compare(CONTINUE_START, 0, decided, 0, decided) === 0;
    const end = mayBeContinue ? bytes.indexOf(HEAD_END) : -1;
    if (mayBeContinue && end === -1 && bytes.length <= MAX_HEAD_BYTES && !hasBareLf(bytes)) {
      this.held = bytes; // wait for the rest of the head
      return;
    }
    if (!mayBeContinue || end === -1 || decided < CONTINUE_START.length || hasBareLf(bytes.subarray(0, end))) {
      this.atAnswerStart = false;
      return this.pass(bytes);
    }
    const rest = bytes.subarray(end + HEAD_END.length);
    if (rest.length > 0) this.inbound(rest); // still at the start: another interim head, or the final one
  }

  private pass(bytes: Buffer): void {
    if (bytes.length > 0 && !this.push(bytes)) this.socket.pause();
  }
}

/** A line end without its CR: llhttp refuses such a head at once, so it is handed over rather than held. */
function hasBareLf(bytes: Buffer): boolean {
  for (let i = bytes.indexOf(LF); i !== -1; i = bytes.indexOf(LF, i + 1)) {
    if (i === 0 || bytes[i - 1] !== CR) return true;
  }
  return false;
}
