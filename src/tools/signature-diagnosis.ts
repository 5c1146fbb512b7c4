import type { KeyObject } from 'node:crypto';
import { signingString } from '../signing/signing-string.js';
import { verifiesWithAny } from '../signing/verify.js';
import { base64Problem } from './base64.js';
import type { CanonicalUrl } from './full-url.js';
import { nonceProblem, timestampProblem } from './sign-inputs.js';
import { signingVariants } from './signature-variants.js';

// Spec 8: a timestamp is accepted from 60 s behind to 5 s ahead of the server's clock.
const MAX_BEHIND_S = 60;
const MAX_AHEAD_S = 5;

export type Mark = '✔' | '✘' | '!';
export interface Finding {
  readonly mark: Mark;
  readonly text: string;
}

export interface SignedRequest {
  readonly method: string;
  readonly url: CanonicalUrl;
  readonly timestamp: string;
  readonly nonce: string;
  readonly signature: string;
  readonly rawBody: string;
}

export interface Diagnosis {
  /** The RSA signature verifies over the rebuilt signing string. */
  readonly verified: boolean;
  /** Verified, and nothing else the gateway checks (header formats, envelope) is wrong. */
  readonly accepted: boolean;
  readonly signingString: string;
  readonly findings: Finding[];
}

/** The same check as the postback receiver's (src/signing/verify.ts), with one key. */
function rsaVerify(key: KeyObject, text: string, signature: Buffer): boolean {
  return verifiesWithAny([key], text, signature);
}

/** Body `data` per spec 2.2, with findings when the envelope is not exactly {"data": "<standard base64>"}. */
function bodyData(rawBody: string, findings: Finding[]): string {
  let body: unknown;
  try {
    body = JSON.parse(rawBody);
  } catch {
    findings.push({ mark: '✘', text: 'body is not JSON: expected the envelope {"data":"<base64>"} (spec 2.2)' });
    return '';
  }
  if (typeof body !== 'object' || body === null || typeof (body as { data?: unknown }).data !== 'string') {
    findings.push({
      mark: '✘',
      text: 'body has no string field "data": not the {"data":"<base64>"} envelope (spec 2.2)',
    });
    return '';
  }
  const extra = Object.keys(body).filter((k) => k !== 'data');
  if (extra.length > 0)
    findings.push({
      mark: '!',
      text: `body carries fields besides data (${extra.join(', ')}); the envelope carries nothing else`,
    });
  const data = (body as { data: string }).data;
  const problem = base64Problem(data);
  findings.push(
    problem === undefined
      ? { mark: '✔', text: 'body data is standard base64 with padding' }
      : { mark: '✘', text: `body data ${problem} (altered, or the signer used another encoding)` },
  );
  return data;
}

/** Timestamp window now, as the gateway would judge it; a warning only, since captures are often old. */
function windowFinding(timestamp: string, nowSeconds: number): Finding | undefined {
  if (timestampProblem(timestamp) !== undefined) return undefined;
  const ahead = Number(timestamp) - nowSeconds;
  if (ahead > MAX_AHEAD_S)
    return {
      mark: '!',
      text: `X-Timestamp is ${ahead} s ahead of now: the gateway answers signature.timestamp.future beyond ${MAX_AHEAD_S} s (check the signer's clock)`,
    };
  if (-ahead > MAX_BEHIND_S)
    return {
      mark: '!',
      text: `X-Timestamp is ${-ahead} s behind now: the gateway answers signature.timestamp.expired beyond ${MAX_BEHIND_S} s (expected for an old capture; --now evaluates at another time)`,
    };
  return {
    mark: '✔',
    text: `X-Timestamp is within the window (${ahead} s from now; allowed -${MAX_BEHIND_S} s to +${MAX_AHEAD_S} s)`,
  };
}

function headerFindings(req: SignedRequest, findings: Finding[]): void {
  const ts = timestampProblem(req.timestamp);
  findings.push(
    ts === undefined ? { mark: '✔', text: 'X-Timestamp is Unix seconds' } : { mark: '✘', text: `X-Timestamp ${ts}` },
  );
  const nonce = nonceProblem(req.nonce);
  findings.push(
    nonce === undefined ? { mark: '✔', text: 'X-Nonce format is valid' } : { mark: '✘', text: `X-Nonce ${nonce}` },
  );
  const sig = base64Problem(req.signature);
  if (sig !== undefined) findings.push({ mark: '✘', text: `X-Signature ${sig}` });
}

/** Explains a failed signature: a near-miss signing string that verifies, a size mismatch, or a wrong key. */
function explainFailure(
  req: SignedRequest,
  data: string,
  key: KeyObject,
  signature: Buffer,
  findings: Finding[],
): void {
  const keyBytes = (key.asymmetricKeyDetails?.modulusLength ?? 0) / 8;
  if (signature.length !== keyBytes) {
    findings.push({
      mark: '✘',
      text: `X-Signature is ${signature.length} bytes but this ${keyBytes * 8}-bit key makes ${keyBytes}-byte signatures: wrong key, or a truncated header`,
    });
    return;
  }
  for (const variant of signingVariants({ ...req, data })) {
    if (rsaVerify(key, variant.signingString, signature)) {
      findings.push({ mark: '✘', text: `the signature verifies over a different signing string: ${variant.rule}` });
      findings.push({ mark: '!', text: `the signer signed: ${variant.signingString}` });
      return;
    }
  }
  findings.push({
    mark: '✘',
    text: 'signature does not match this public key: wrong key (compare fingerprints), or the URL, timestamp, nonce or data were altered after signing',
  });
}

export function diagnose(req: SignedRequest, key: KeyObject, nowSeconds: number): Diagnosis {
  const findings: Finding[] = [];
  headerFindings(req, findings);
  const data = bodyData(req.rawBody, findings);
  const text = signingString({
    method: req.method,
    fullUrl: req.url.url,
    timestamp: req.timestamp,
    nonce: req.nonce,
    data,
  });
  const signature = Buffer.from(req.signature, 'base64');
  const verified = signature.length > 0 && rsaVerify(key, text, signature);
  const window = windowFinding(req.timestamp, nowSeconds);
  if (window !== undefined) findings.push(window);
  // Format faults (base64url signature, millisecond timestamp, bad nonce, non-canonical data) are signed as
  // sent, so the RSA check can pass on a request the gateway still refuses: the verdict must include them.
  const formatFault = findings.some((f) => f.mark === '✘');
  if (verified) findings.push({ mark: '✔', text: 'signature verifies (RSA PKCS#1 v1.5, SHA-256)' });
  else explainFailure(req, data, key, signature, findings);
  return { verified, accepted: verified && !formatFault, signingString: text, findings };
}
