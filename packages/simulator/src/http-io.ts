// Reading bodies and writing JSON answers. Every response carries a Date header from the simulator's clock,
// so a client that estimates skew from `Date` sees the shifted clock, as it would see a gateway's drifting one.
import type { IncomingMessage, ServerResponse } from 'node:http';
import { SimError } from './errors.js';
import type { SimClock } from './clock.js';

/** Payload size is not in the spec; 1 MiB is far above any real deposit and keeps a stray upload harmless. */
export const MAX_BODY_BYTES = 1024 * 1024;

export function readBody(req: IncomingMessage, limit = MAX_BODY_BYTES): Promise<Buffer> {
  const declared = Number(req.headers['content-length'] ?? '0');
  if (declared > limit) return Promise.reject(tooLarge(limit));
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    const onData = (chunk: Buffer): void => {
      size += chunk.length;
      if (size > limit) {
        req.off('data', onData);
        // Keep draining so the client can finish writing and read our 413 instead of a broken pipe.
        req.resume();
        reject(tooLarge(limit));
        return;
      }
      chunks.push(chunk);
    };
    req.on('data', onData);
    req.once('end', () => resolve(Buffer.concat(chunks)));
    req.once('error', reject);
  });
}

function tooLarge(limit: number): SimError {
  return new SimError(
    413,
    'request.body.too_large',
    `request body exceeds ${limit} bytes`,
    {},
    { connection: 'close' },
  );
}

export function sendJson(
  res: ServerResponse,
  clock: SimClock,
  status: number,
  body: unknown,
  headers: Readonly<Record<string, string>> = {},
): void {
  if (res.headersSent || res.destroyed) return;
  const text = JSON.stringify(body);
  res.sendDate = false;
  res.writeHead(status, {
    ...headers,
    date: new Date(clock.nowMs()).toUTCString(),
    'content-type': 'application/json; charset=utf-8',
    'content-length': Buffer.byteLength(text),
    'cache-control': 'no-store',
  });
  res.end(text);
}

export function sendError(res: ServerResponse, clock: SimClock, err: SimError): void {
  sendJson(res, clock, err.status, err.toBody(), err.headers);
}

/** `application/json`, optionally with parameters (`; charset=utf-8`); anything else is refused with 415. */
export function requireJsonContentType(req: IncomingMessage): void {
  const value = req.headers['content-type'];
  const mediaType = value?.split(';')[0]?.trim().toLowerCase();
  if (mediaType !== 'application/json') {
    throw new SimError(
      415,
      'request.content_type.invalid',
      `Content-Type must be application/json, got ${value === undefined ? 'none' : JSON.stringify(value)}`,
    );
  }
}

/** Parses a JSON object body or throws a 400 naming the problem. */
export function parseJsonObject(
  body: Buffer,
  code = 'request.body.invalid_json',
  what = 'request body',
): Record<string, unknown> {
  let value: unknown;
  try {
    // ignoreBOM keeps a leading U+FEFF in the text, so JSON.parse refuses it: JSON over HTTP has no BOM (RFC
    // 8259 8.1), and a gateway that tolerated one would hide a client bug until production.
    value = JSON.parse(new TextDecoder('utf-8', { fatal: true, ignoreBOM: true }).decode(body));
  } catch {
    throw new SimError(400, code, `${what} is not valid UTF-8 JSON`);
  }
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    throw new SimError(400, code, `${what} must be a JSON object`);
  }
  return value as Record<string, unknown>;
}
