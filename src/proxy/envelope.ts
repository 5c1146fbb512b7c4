import { sidecarErrors } from '../errors.js';

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
