// The client's body: its media type, its bytes (bounded), and the envelope they are wrapped in for the gateway.
import type { IncomingMessage } from 'node:http';
import { sidecarErrors } from '../errors.js';
import { readBoundedBody, type BodyRead } from '../inbound/body.js';

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
 * The whole body within `limit` bytes (src/inbound/body.ts), or the egress listener's error for what went wrong:
 * sidecar.body.too_large, sidecar.body.incomplete. The exact bytes are kept: they are what gets signed.
 */
export function readBody(req: IncomingMessage, limit: number): Promise<Buffer> {
  // A function of its own, not an async step: one promise per request fewer on the hot path (docs/performance.md).
  return readBoundedBody(req, limit).then(bytesOrRefusal);
}

function bytesOrRefusal(read: BodyRead): Buffer {
  if (read.kind === 'too_large') throw sidecarErrors.tooLarge(read.limit);
  if (read.kind === 'incomplete') throw sidecarErrors.bodyIncomplete();
  return read.bytes;
}

// ignoreBOM keeps a leading byte order mark in the text, where JSON.parse refuses it: a BOM is not JSON (RFC 8259
// 8.1), and the gateway refuses the bytes with it, which are what would be signed and sent.
const utf8 = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true });

export interface Envelope {
  /** Standard base64 (with padding) of the exact bytes received: spec 2.2. */
  readonly data: string;
  /** The body sent upstream: `{"data":"..."}` and nothing else. */
  readonly json: string;
  /** The client's payload as parsed, for checks only: what is signed and sent is the bytes as received. */
  readonly payload: Readonly<Record<string, unknown>>;
}

/**
 * Checks that the body is one JSON object and wraps the bytes as received. The bytes are not re-serialised:
 * whitespace, key order and number formats reach the gateway exactly as the internal service wrote them.
 */
export function wrapEnvelope(body: Buffer): Envelope {
  let value: unknown;
  try {
    value = JSON.parse(utf8.decode(body));
  } catch {
    throw sidecarErrors.invalidJson();
  }
  if (typeof value !== 'object' || value === null || Array.isArray(value)) throw sidecarErrors.notObject();
  const data = body.toString('base64');
  // Base64 needs no JSON escaping, so the envelope is built directly.
  return { data, json: `{"data":"${data}"}`, payload: value as Record<string, unknown> };
}
