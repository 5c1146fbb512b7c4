import { createHash } from 'node:crypto';
import type { Logger } from '../observability/log.js';
import { signingString } from '../signing/signing-string.js';
import type { SignedResult } from './signed-send.js';

export interface RequestLogEntry {
  readonly requestId: string;
  readonly route: string;
  readonly status: number;
  readonly code: string;
  readonly attempts: number;
  readonly durationMs: number;
  /** The client's body; only its length and SHA-256 are logged. */
  readonly payload?: Buffer;
}

function sha256Hex(value: string | Buffer): string {
  return createHash('sha256').update(value).digest('hex');
}

/**
 * One line per request. The payload appears only as its length and SHA-256: enough to match it against the
 * internal service's own log, never enough to read it.
 */
export function logRequest(log: Logger, entry: RequestLogEntry): void {
  const level = entry.status >= 500 ? 'error' : entry.status >= 400 ? 'warn' : 'info';
  // The digest is computed only for a line that is written: at level warn, successes cost nothing here.
  if (!log.isLevelEnabled(level)) return;
  const { payload, ...fields } = entry;
  const digest = payload ? { payloadBytes: payload.length, payloadSha256: sha256Hex(payload) } : {};
  log[level]({ event: 'request', ...fields, ...digest }, 'request answered');
}

/**
 * signature.verify.failed is the most common integration failure. The signing string is logged with `data`
 * replaced by its SHA-256, so an operator can diff it against the gateway's expectation without the payload.
 */
export function logVerifyFailure(log: Logger, requestId: string, result: SignedResult, data: string): void {
  const redacted = signingString({ method: 'POST', ...result.signed, data: `sha256:${sha256Hex(data)}` });
  log.warn(
    { event: 'signature.verify.failed', requestId, signingString: redacted, fullUrl: result.signed.fullUrl },
    'gateway could not verify the signature; compare this signing string with the one the gateway expects',
  );
}
