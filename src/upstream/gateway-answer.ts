import { maskSecrets, type Secret } from '../config/secret.js';
import { GATEWAY_ERROR_CODES, type GatewayErrorCode } from '../observability/metric-names.js';
import { upstreamErrors, type UpstreamError } from './upstream-errors.js';

// The gateway's answer, and everything the sidecar reads in it: its code, its metric label, a token rejection, a
// timestamp refusal, and whether it belongs to its request at all (correlation).

/** A complete final answer of the gateway, as undici delivered it. */
export interface UpstreamResponse {
  readonly status: number;
  readonly headers: Record<string, string | string[]>;
  readonly body: Buffer;
}

/** The largest answer body read as JSON for a field or two: gateway answers are small, a stray one may not be. */
const MAX_JSON_BODY_BYTES = 64 * 1024;

/** A gateway body as a JSON object, or undefined when it is empty, too large, not JSON, or not an object. */
export function jsonObject(body: Buffer): Record<string, unknown> | undefined {
  if (body.length === 0 || body.length > MAX_JSON_BODY_BYTES) return undefined;
  try {
    const value: unknown = JSON.parse(body.toString('utf8'));
    return typeof value === 'object' && value !== null && !Array.isArray(value)
      ? (value as Record<string, unknown>)
      : undefined;
  } catch {
    return undefined;
  }
}

/**
 * The gateway's own `code` field of an error answer, if its body is a JSON object that has one, with the access
 * token the request carried masked (it goes to the request log and the span). Successes are not parsed: nothing
 * reads their code, and they are the hot path.
 */
export function gatewayCode(response: UpstreamResponse, bearer: Secret): string | undefined {
  if (response.status < 400) return undefined;
  const code = jsonObject(response.body)?.code;
  return typeof code === 'string' ? maskSecrets(code, [bearer]) : undefined;
}

/** Spec 5.1: HTTP 401 with body code FAILED means the token was refused before anything was done. */
export function isTokenRejection(status: number, code: string | undefined): boolean {
  return status === 401 && code === 'FAILED';
}

/** Spec 7's timestamp refusals: the gateway's clock moved away from what the correction assumed. */
const TIMESTAMP_REFUSALS = new Set(['signature.timestamp.expired', 'signature.timestamp.future']);

export function isTimestampRefusal(code: string | undefined): boolean {
  return code !== undefined && TIMESTAMP_REFUSALS.has(code);
}

const KNOWN = new Set<string>(GATEWAY_ERROR_CODES);

/** Metric label for a gateway error answer, bounded to the contract's set; undefined for a success. */
export function errorLabel(status: number, code: string | undefined): GatewayErrorCode | undefined {
  if (status < 400) return undefined;
  if (status === 403) return 'ip.forbidden';
  return code !== undefined && KNOWN.has(code) ? (code as GatewayErrorCode) : 'other';
}

// Which answer is this request's.

/** An error when the answer cannot be this request's (a stray copy of an earlier one); undefined otherwise. */
export type AnswerCheck = (response: UpstreamResponse) => UpstreamError | undefined;

/**
 * On a keep-alive HTTP/1.1 connection, a gateway that writes a stray second copy of an answer can have that copy
 * read as the next request's answer; nothing in HTTP/1.1 tells them apart. Where the client's payload and the
 * gateway's JSON answer both carry a correlation field (invoice_no by default), their values must be equal, or
 * the answer is not this request's. Answers without the field, or payloads without it, cannot be checked.
 * Undefined when the payload carries none of the fields: nothing to compare.
 */
export function answerCorrelation(
  fields: readonly string[],
  payload: Readonly<Record<string, unknown>>,
): AnswerCheck | undefined {
  const expected: Array<readonly [field: string, value: string]> = [];
  for (const field of fields) if (Object.hasOwn(payload, field)) expected.push([field, comparable(payload[field])]);
  if (expected.length === 0) return undefined;
  return (response) => {
    const { body } = response;
    if (!expected.some(([field]) => body.includes(quoted(field))) && !body.includes(BACKSLASH)) return undefined;
    const answer = jsonObject(body);
    if (answer === undefined) return undefined;
    const differing = expected.find(
      ([field, value]) => Object.hasOwn(answer, field) && comparable(answer[field]) !== value,
    );
    return differing === undefined ? undefined : upstreamErrors.answerMismatch(differing[0]);
  };
}

/**
 * A key appears in JSON text as its quoted self unless written with escapes: a body with neither that nor any
 * backslash cannot hold the field, and is not parsed (successes, the hot path, seldom echo it). Made once a field.
 */
const quotedFields = new Map<string, string>();
function quoted(field: string): string {
  let needle = quotedFields.get(field);
  if (needle === undefined) quotedFields.set(field, (needle = JSON.stringify(field)));
  return needle;
}

const BACKSLASH = 0x5c;

/** A gateway may echo `"123"` for `123`: values are compared as text, objects by their JSON. */
function comparable(value: unknown): string {
  return typeof value === 'string' ? value : (JSON.stringify(value) ?? '');
}
