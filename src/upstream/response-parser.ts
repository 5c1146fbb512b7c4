/**
 * An incremental HTTP/1.1 response parser for the answer to one POST (RFC 9112), strict where laxness could
 * misframe an answer about money: a response is either parsed exactly or rejected, never guessed at.
 *
 * Framing, in RFC 9112 6.3 order: interim 1xx heads are skipped (101 is an error: nothing asked to switch);
 * 204 and 304 have no body; `Transfer-Encoding: chunked` is decoded (any other coding is refused: the request
 * never offered one); otherwise `Content-Length` (repeated values must agree); otherwise the body runs until the
 * gateway closes the connection.
 */

import { memoizeLast } from '../memoize-last.js';
import { FIELD_NAME, FIELD_VALUE } from './http-grammar.js';
import { UpstreamError } from './outcome.js';

export class ResponseParseError extends UpstreamError {
  constructor(message: string) {
    super('ERR_GATEWAY_RESPONSE_INVALID', message);
  }
}

export class ResponseTooLargeError extends UpstreamError {
  constructor(message: string) {
    super('ERR_GATEWAY_RESPONSE_TOO_LARGE', message);
  }
}

export interface ParserLimits {
  /** Status line plus header lines, in bytes (Node's own HTTP server allows 16 KiB). */
  readonly maxHeadBytes: number;
  readonly maxBodyBytes: number;
}

export type ResponseHeaders = Record<string, string | string[]>;

const enum Stage {
  Head,
  FixedBody,
  ChunkSize,
  ChunkData,
  ChunkDataEnd,
  Trailers,
  UntilClose,
  Done,
}

const STATUS_LINE = /^HTTP\/1\.[01] [1-9]\d\d(?: [\t\x20-\x7e\x80-\xff]*)?$/;
// A whole head: the status line, then header lines of a token, a colon and a value (RFC 9110 5.1, 5.5). A value
// cannot hold CR or LF, so every line break must start a header line that matches in turn: a bare CR or LF, a
// folded line or a line without a colon fails the whole head. The pattern is linear: the name's characters
// exclude the colon, and a value's exclude CR. Its backtrack stack grows with the head, which is why it relies on
// the head-size cap (64 KiB in the pool): a head of megabytes would overflow it.
const VALID_HEAD = /^HTTP\/1\.[01] [1-9]\d\d(?: [\t\x20-\x7e\x80-\xff]*)?(?:\r\n[!#$%&'*+\-.^_`|~0-9A-Za-z]+:[\t\x20-\x7e\x80-\xff]*)*$/;
const CHUNK_SIZE_LINE = /^0*([0-9A-Fa-f]{1,8})[\t ]*(?:;[\t\x20-\x7e\x80-\xff]*)?$/;
const CONTENT_LENGTH = /^\d{1,15}$/;
const CRLF = 0x0a0d; // "\r\n" read as a little-endian uint16
const MAX_CHUNK_LINE = 1024;

export class ResponseParser {
  status = 0;
  headers: ResponseHeaders = {};
  /** Whether the connection may carry another request once this response is complete. */
  keepAlive = false;
  /** Seconds from a `Keep-Alive: timeout=N` hint, if the gateway sent one. */
  keepAliveHintSeconds: number | undefined;
  /** Bytes that arrived after the complete response (a gateway must not send any). */
  trailing = 0;

  private stage = Stage.Head;
  private pending: Buffer | undefined;
  private remaining = 0;
  private readonly chunks: Buffer[] = [];
  private size = 0;

  constructor(private readonly limits: ParserLimits) {}

  get complete(): boolean {
    return this.stage === Stage.Done;
  }

  /** Whether the response so far can only end with the connection (no length was given). */
  get endsWithClose(): boolean {
    return this.stage === Stage.UntilClose;
  }

  body(): Buffer {
    return this.chunks.length === 1 ? this.chunks[0]! : Buffer.concat(this.chunks, this.size);
  }

  /** Feeds the next bytes from the socket; returns true once the response is complete. Throws on bad input. */
  push(chunk: Buffer): boolean {
    const data = this.pending === undefined ? chunk : Buffer.concat([this.pending, chunk]);
    this.pending = undefined;
    let at = 0;
    while (at < data.length && this.stage !== Stage.Done) {
      const next = this.step(data, at);
      if (next < 0) {
        this.pending = data.subarray(at);
        return false;
      }
      at = next;
    }
    if (this.stage === Stage.Done) this.trailing += data.length - at;
    return this.stage === Stage.Done;
  }

  /** The gateway closed the connection: completes a body that runs until close, otherwise the answer is cut. */
  end(): boolean {
    if (this.stage === Stage.UntilClose) this.stage = Stage.Done;
    return this.stage === Stage.Done;
  }

  /** Consumes from `at`; returns the next offset, or -1 when more bytes are needed to go on. */
  private step(data: Buffer, at: number): number {
    switch (this.stage) {
      case Stage.Head:
        return this.readHead(data, at);
      case Stage.FixedBody:
      case Stage.ChunkData: {
        const take = Math.min(this.remaining, data.length - at);
        this.keep(data.subarray(at, at + take));
        this.remaining -= take;
        if (this.remaining === 0) this.stage = this.stage === Stage.FixedBody ? Stage.Done : Stage.ChunkDataEnd;
        return at + take;
      }
      case Stage.ChunkSize:
        return this.readChunkSize(data, at);
      case Stage.ChunkDataEnd:
        if (data.length - at < 2) return -1;
        if (data.readUInt16LE(at) !== CRLF) throw new ResponseParseError('chunk data not followed by CRLF');
        this.stage = Stage.ChunkSize;
        return at + 2;
      case Stage.Trailers:
        return this.readTrailer(data, at);
      case Stage.UntilClose:
        this.keep(data.subarray(at));
        return data.length;
      case Stage.Done:
        return data.length;
    }
  }

  private readHead(data: Buffer, at: number): number {
    // Empty lines before a status line are skipped, as llhttp does (RFC 9112 2.2 robustness).
    if (data[at] === 0x0d || data[at] === 0x0a) {
      while (at < data.length && (data[at] === 0x0d || data[at] === 0x0a)) at++;
      return at;
    }
    const end = data.indexOf('\r\n\r\n', at, 'latin1');
    if (end < 0) {
      // Up to three bytes of the terminator may already be here; they do not count against the limit.
      if (data.length - at > this.limits.maxHeadBytes + 3) throw new ResponseParseError('response head too large');
      // A head with bare LF line ends would never show the terminator: refuse it now, not at the response timeout.
      for (let lf = data.indexOf(0x0a, at); lf >= 0; lf = data.indexOf(0x0a, lf + 1)) {
        if (data[lf - 1] !== 0x0d) throw new ResponseParseError('bare LF in the response head');
      }
      return -1;
    }
    if (end - at > this.limits.maxHeadBytes) throw new ResponseParseError('response head too large');
    const head = data.toString('latin1', at, end);
    const lines = head.split('\r\n');
    // One run over the whole head decides whether it is well formed; only a head that fails is checked line by
    // line, to say what is wrong with it.
    const valid = VALID_HEAD.test(head);
    if (!valid && !STATUS_LINE.test(lines[0]!)) throw new ResponseParseError('malformed status line');
    const statusLine = lines[0]!;
    const code = Number(statusLine.slice(9, 12));
    const headers = parseHeaderLines(lines, valid);
    if (code < 200) {
      // Interim answers (100 Continue, 103 Early Hints) precede the real one; 101 would hand the socket over.
      if (code === 101) throw new ResponseParseError('unexpected 101 Switching Protocols');
      return end + 4;
    }
    this.status = code;
    this.headers = headers;
    const connection = tokens(headers.connection);
    this.keepAlive = statusLine[7] === '1' && !connection.includes('close');
    this.keepAliveHintSeconds = keepAliveHint(headers['keep-alive']);
    this.frameBody(code, headers);
    return end + 4;
  }

  private frameBody(code: number, headers: ResponseHeaders): void {
    if (code === 204 || code === 304) {
      this.stage = Stage.Done;
      return;
    }
    const transferEncoding = headers['transfer-encoding'];
    if (transferEncoding !== undefined) {
      const codings = tokens(transferEncoding);
      if (codings.length !== 1 || codings[0] !== 'chunked') throw new ResponseParseError('unsupported transfer-encoding');
      // A length beside chunked framing is a smuggling signature: decode the chunks, never reuse the socket.
      if (headers['content-length'] !== undefined) this.keepAlive = false;
      this.stage = Stage.ChunkSize;
      return;
    }
    const length = contentLength(headers['content-length']);
    if (length === undefined) {
      this.keepAlive = false;
      this.stage = Stage.UntilClose;
      return;
    }
    if (length > this.limits.maxBodyBytes) throw new ResponseTooLargeError(`gateway response exceeds ${this.limits.maxBodyBytes} bytes`);
    this.remaining = length;
    this.stage = length === 0 ? Stage.Done : Stage.FixedBody;
  }

  private readChunkSize(data: Buffer, at: number): number {
    const end = data.indexOf('\r\n', at, 'latin1');
    if (end < 0) {
      if (data.length - at > MAX_CHUNK_LINE) throw new ResponseParseError('chunk size line too long');
      return -1;
    }
    const line = CHUNK_SIZE_LINE.exec(data.toString('latin1', at, end));
    if (line === null) throw new ResponseParseError('malformed chunk size');
    const size = parseInt(line[1]!, 16);
    if (this.size + size > this.limits.maxBodyBytes) throw new ResponseTooLargeError(`gateway response exceeds ${this.limits.maxBodyBytes} bytes`);
    this.remaining = size;
    this.stage = size === 0 ? Stage.Trailers : Stage.ChunkData;
    return end + 2;
  }

  /** Trailer fields are read and dropped: nothing in the API uses them, and they may not be trusted as headers. */
  private readTrailer(data: Buffer, at: number): number {
    const end = data.indexOf('\r\n', at, 'latin1');
    if (end < 0) {
      if (data.length - at > this.limits.maxHeadBytes) throw new ResponseParseError('trailer too large');
      return -1;
    }
    if (end === at) {
      this.stage = Stage.Done;
      return end + 2;
    }
    parseHeaderLines(['', data.toString('latin1', at, end)]);
    return end + 2;
  }

  private keep(bytes: Buffer): void {
    if (bytes.length === 0) return;
    this.size += bytes.length;
    if (this.size > this.limits.maxBodyBytes) throw new ResponseTooLargeError(`gateway response exceeds ${this.limits.maxBodyBytes} bytes`);
    this.chunks.push(bytes);
  }
}

/**
 * Lines after the first; a repeated field becomes an array, as undici and the proxy's header filter expect.
 * `wellFormed` says VALID_HEAD already accepted them, so each line's own checks are skipped.
 */
function parseHeaderLines(lines: string[], wellFormed = false): ResponseHeaders {
  // No prototype: a field named `constructor` or `__proto__` is an ordinary header here.
  const headers = Object.create(null) as ResponseHeaders;
  for (let i = 1; i < lines.length; i++) {
    const line = lines[i]!;
    const colon = line.indexOf(':');
    // No colon, whitespace before it, or a folded continuation line (RFC 9112 5.2: obsolete, to be rejected).
    if (colon <= 0) throw new ResponseParseError('malformed header line');
    const name = line.slice(0, colon);
    if (!wellFormed && !FIELD_NAME.test(name)) throw new ResponseParseError('malformed header name');
    const value = withoutOws(line, colon + 1);
    if (!wellFormed && !FIELD_VALUE.test(value)) throw new ResponseParseError('malformed header value');
    const key = name.toLowerCase();
    const seen = headers[key];
    if (seen === undefined) headers[key] = value;
    else if (typeof seen === 'string') headers[key] = [seen, value];
    else seen.push(value);
  }
  return headers;
}

/** The value without surrounding spaces and tabs (RFC 9110 5.5); `trim()` would also eat bytes that must fail. */
function withoutOws(line: string, from: number): string {
  let start = from;
  let end = line.length;
  while (start < end && isOws(line.charCodeAt(start))) start++;
  while (end > start && isOws(line.charCodeAt(end - 1))) end--;
  return line.slice(start, end);
}

function isOws(char: number): boolean {
  return char === 0x20 || char === 0x09;
}

/** Comma-separated list members, lowercased, across repeated fields. */
function tokens(value: string | string[] | undefined): string[] {
  if (value === undefined) return [];
  if (value === 'keep-alive' || value === 'close' || value === 'chunked') return [value];
  const joined = typeof value === 'string' ? value : value.join(',');
  return joined
    .split(',')
    .map((t) => t.trim().toLowerCase())
    .filter((t) => t !== '');
}

/** RFC 9110 8.6: every value (repeated or listed) must be the same number, or the message is invalid. */
function contentLength(value: string | string[] | undefined): number | undefined {
  if (value === undefined) return undefined;
  if (typeof value === 'string' && CONTENT_LENGTH.test(value)) return Number(value);
  const values = (typeof value === 'string' ? value : value.join(',')).split(',').map((v) => v.trim());
  if (!values.every((v) => CONTENT_LENGTH.test(v) && v === values[0])) throw new ResponseParseError('invalid content-length');
  return Number(values[0]);
}

function keepAliveHint(value: string | string[] | undefined): number | undefined {
  return value === undefined ? undefined : timeoutParameter(typeof value === 'string' ? value : value.join(','));
}

// A gateway sends the same Keep-Alive value on every answer: it is parsed once.
const timeoutParameter = memoizeLast((text: string): number | undefined => {
  const match = /(?:^|[,\s])timeout=(\d+)/i.exec(text);
  return match === null ? undefined : Number(match[1]);
});
