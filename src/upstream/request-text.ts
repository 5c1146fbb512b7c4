import { FIELD_NAME, FIELD_VALUE } from './http-grammar.js';
import { UpstreamError, type UpstreamRequest } from './outcome.js';

const invalid = (message: string): UpstreamError => new UpstreamError('ERR_INVALID_UPSTREAM_REQUEST', message);

// Origin-form request target: visible ASCII only (Node's server already answers 400 to anything else).
const REQUEST_TARGET = /^\/[!-~]*$/;
// The common case, checked first: ASCII values leave in one UTF-8 string. Values with obs-text (0x80-0xFF, which
// Node's server hands over as latin1 characters) must leave as the same bytes, so they switch the head to latin1.
const ASCII_HEADER_VALUE = /^[\t\x20-\x7e]*$/;
// The connection layer frames every request itself.
const FRAMING = new Set(['host', 'content-length', 'transfer-encoding', 'connection', 'keep-alive', 'te', 'upgrade', 'expect']);

/**
 * The whole request, written in one call so head and body leave in one segment where they fit: a string (sent as
 * UTF-8) when the head is ASCII, as it almost always is; otherwise a Buffer with the head in latin1, byte for byte
 * what the client sent, and the body in UTF-8.
 * Throws an ERR_INVALID_UPSTREAM_REQUEST error (naming the header, never quoting its value, which may be a token).
 */
export function requestText(hostHeader: string, request: UpstreamRequest): string | Buffer {
  if (!REQUEST_TARGET.test(request.path)) throw invalid('request path has characters not allowed in a request line');
  let head = `POST ${request.path} HTTP/1.1\r\nhost: ${hostHeader}\r\n`;
  let ascii = true;
  const headers = request.headers;
  for (const name of Object.keys(headers)) {
    const value = headers[name]!;
    if (!FIELD_NAME.test(name)) throw invalid('a header name has characters not allowed in HTTP');
    if (!ASCII_HEADER_VALUE.test(value)) {
      if (!FIELD_VALUE.test(value)) throw invalid(`header ${name} has characters not allowed in HTTP`);
      ascii = false;
    }
    if (FRAMING.has(name.toLowerCase())) throw invalid(`header ${name} is set by the connection layer`);
    head += `${name}: ${value}\r\n`;
  }
  head += `content-length: ${Buffer.byteLength(request.body)}\r\n\r\n`;
  return ascii ? head + request.body : Buffer.concat([Buffer.from(head, 'latin1'), Buffer.from(request.body, 'utf8')]);
}
