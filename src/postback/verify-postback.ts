// Verification of one postback (spec 6, with the simulator's documented reading of what the spec leaves open):
// body {"data": base64(JSON)}, headers X-Timestamp, X-Nonce, X-Signature, signing string
// POST.<public URL>.<X-Timestamp>.<X-Nonce>.<data>, RSA-SHA256 PKCS#1 v1.5. Pure: the body's bytes and the headers
// in, a verified postback or a refusal out; no store, no I/O.
import { createHash, type KeyObject } from 'node:crypto';
import type { IncomingHttpHeaders } from 'node:http';
import { NONCE_PATTERN } from '../signing/nonce.js';
import { signingString } from '../signing/signing-string.js';
import { decodeStrictBase64, verifiesWithAny } from '../signing/verify.js';
import { PostbackRefusal, postbackRefusals } from './refusal.js';

export interface PostbackVerifierOptions {
  /** FULL_URL of the public webhook URL, canonical by spec 5.2 (signedPostbackUrl). */
  readonly signedUrl: string;
  /** The keys in use, read per postback: a rotated key file replaces them without a restart. */
  readonly publicKeys: () => readonly KeyObject[];
  readonly acceptUnsigned: boolean;
  readonly maxAgeSeconds: number;
  readonly maxFutureSeconds: number;
}

export interface VerifiedPostback {
  readonly verified: 'signature' | 'unsigned';
  /** The decoded payload: exactly the bytes the gateway encoded, a JSON object. */
  readonly payload: Buffer;
  /** SHA-256 of the payload, hex: what recognises a redelivery. */
  readonly digest: string;
  readonly timestamp: string | undefined;
  readonly nonce: string | undefined;
}

export type Verification =
  | { readonly kind: 'verified'; readonly postback: VerifiedPostback }
  | { readonly kind: 'refused'; readonly refusal: PostbackRefusal };

const SIGNATURE_HEADERS = ['x-timestamp', 'x-nonce', 'x-signature'] as const;
const UNIX_SECONDS = /^\d{1,12}$/;

/**
 * One value per header. Node joins a repeated X-* header into one "a, b" value, which then fails its format check; an
 * array (never produced for these names today) is refused the same way.
 */
function single(headers: IncomingHttpHeaders, name: string): string | undefined {
  const value = headers[name];
  return Array.isArray(value) ? undefined : value;
}

/** The `data` string of the envelope, read before anything decodes it (the signature covers it as sent). */
function envelopeData(body: Buffer): string {
  let envelope: unknown;
  try {
    envelope = JSON.parse(body.toString('utf8'));
  } catch {
    throw postbackRefusals.bodyInvalid('body is not JSON: expected {"data":"<base64 of the JSON payload>"}');
  }
  const data = (envelope as { data?: unknown } | null)?.data;
  if (typeof envelope !== 'object' || envelope === null || Array.isArray(envelope) || typeof data !== 'string') {
    throw postbackRefusals.bodyInvalid('body is not the envelope {"data":"<base64 of the JSON payload>"}');
  }
  return data;
}

/**
 * Fatal: bytes that are not UTF-8 would otherwise be checked as U+FFFD and delivered as they are, so that the
 * application parses other text than the one checked here. A byte order mark is kept, so JSON.parse refuses it.
 */
const UTF8 = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true });

/** The payload inside `data`: strict standard base64 of a JSON object, in UTF-8 (RFC 8259 8.1). */
function decodePayload(data: string): Buffer {
  const payload = decodeStrictBase64(data);
  if (payload === undefined) throw postbackRefusals.bodyInvalid('data is not standard base64 with padding');
  let parsed: unknown;
  try {
    parsed = JSON.parse(UTF8.decode(payload));
  } catch {
    throw postbackRefusals.bodyInvalid('data does not hold JSON in UTF-8');
  }
  if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed)) {
    throw postbackRefusals.bodyInvalid('data does not hold a JSON object');
  }
  return payload;
}

function checkWindow(options: PostbackVerifierOptions, timestamp: string, nowSeconds: number): void {
  if (!UNIX_SECONDS.test(timestamp)) throw postbackRefusals.signatureInvalid('X-Timestamp is not Unix seconds');
  const behind = nowSeconds - Number(timestamp);
  if (behind > options.maxAgeSeconds) {
    throw postbackRefusals.timestampExpired(`X-Timestamp is more than ${options.maxAgeSeconds} s old`);
  }
  if (-behind > options.maxFutureSeconds) {
    throw postbackRefusals.timestampFuture(`X-Timestamp is more than ${options.maxFutureSeconds} s ahead`);
  }
}

function result(
  verified: VerifiedPostback['verified'],
  payload: Buffer,
  timestamp?: string,
  nonce?: string,
): VerifiedPostback {
  const digest = createHash('sha256').update(payload).digest('hex');
  return { verified, payload, digest, timestamp, nonce };
}

/**
 * Verifies a postback, or says why it is refused. A postback carrying any signature header is always verified,
 * whatever acceptUnsigned says: a bad signature is never waved through as "unsigned".
 */
export function createPostbackVerifier(options: PostbackVerifierOptions) {
  return (headers: IncomingHttpHeaders, body: Buffer, nowSeconds: number): Verification => {
    try {
      return { kind: 'verified', postback: verify(options, headers, body, nowSeconds) };
    } catch (err) {
      if (err instanceof PostbackRefusal) return { kind: 'refused', refusal: err };
      throw err;
    }
  };
}

/** The checks in order; each throws its PostbackRefusal. */
function verify(
  options: PostbackVerifierOptions,
  headers: IncomingHttpHeaders,
  body: Buffer,
  nowSeconds: number,
): VerifiedPostback {
  const present = SIGNATURE_HEADERS.filter((name) => headers[name] !== undefined);
  if (present.length === 0) {
    if (!options.acceptUnsigned) {
      throw postbackRefusals.signatureMissing('X-Timestamp, X-Nonce and X-Signature are required');
    }
    return result('unsigned', decodePayload(envelopeData(body)));
  }
  if (present.length < SIGNATURE_HEADERS.length) {
    const missing = SIGNATURE_HEADERS.filter((name) => !present.includes(name));
    throw postbackRefusals.signatureMissing(`signature header(s) missing: ${missing.join(', ')}`);
  }
  const [timestamp, nonce, signature] = SIGNATURE_HEADERS.map((name) => single(headers, name));
  if (timestamp === undefined || nonce === undefined || signature === undefined) {
    throw postbackRefusals.signatureInvalid('a signature header appears more than once');
  }
  checkWindow(options, timestamp, nowSeconds);
  if (!NONCE_PATTERN.test(nonce)) throw postbackRefusals.signatureInvalid('X-Nonce is not 16 to 64 of [A-Za-z0-9_-]');
  const data = envelopeData(body);
  const signatureBytes = decodeStrictBase64(signature);
  const text = signingString({ method: 'POST', fullUrl: options.signedUrl, timestamp, nonce, data });
  if (signatureBytes === undefined || !verifiesWithAny(options.publicKeys(), text, signatureBytes)) {
    throw postbackRefusals.signatureInvalid('the signature does not verify with the configured public key(s)');
  }
  return result('signature', decodePayload(data), timestamp, nonce);
}

export type PostbackVerifier = ReturnType<typeof createPostbackVerifier>;
