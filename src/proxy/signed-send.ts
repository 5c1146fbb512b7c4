import type { BaseAddress } from '../config/base-url.js';
import { sidecarErrors } from '../errors.js';
import { memoizeLast } from '../memoize-last.js';
import type { SidecarMetrics } from '../observability/metrics.js';
import { signedUrl, upstreamPath, type RequestTarget } from '../signing/canonical-url.js';
import { newNonce } from '../signing/nonce.js';
import type { Signer } from '../signing/signer.js';
import { signingString, unixTimestamp } from '../signing/signing-string.js';
import { backoffDelayMs, sleep } from '../token/backoff.js';
import type { TokenManager } from '../token/token-manager.js';
import type { UpstreamResponse, Forwarder } from '../upstream/forwarder.js';
import { errorLabel, gatewayCode, isTokenRejection } from './gateway-answer.js';

const DATE_RESOLUTION_MS = 1000;

export interface SignedSendDeps {
  readonly base: BaseAddress;
  readonly signer: Signer;
  readonly tokens: TokenManager;
  readonly forwarder: Forwarder;
  readonly metrics: SidecarMetrics;
  readonly connectRetryDeadlineMs: number;
  readonly now?: () => number;
}

export interface SignedRequest {
  readonly route: string;
  readonly target: RequestTarget;
  readonly envelope: { readonly data: string; readonly json: string };
  readonly headers: Record<string, string>;
  /**
   * Counts sends as they happen, so that when sendSigned throws (outcome unknown, token unavailable after a
   * FAILED) the request log still says how many copies reached the gateway: 0 means certainly none.
   */
  readonly progress?: { sent: number };
}

export interface SignedResult {
  readonly response: UpstreamResponse;
  readonly gatewayCode: string | undefined;
  readonly attempts: number;
  /** Parts of the last signing string, for the diagnostic log on signature.verify.failed. */
  readonly signed: { readonly fullUrl: string; readonly timestamp: string; readonly nonce: string };
}

interface Attempt {
  readonly outcome: Awaited<ReturnType<Forwarder['send']>>;
  readonly signed: SignedResult['signed'];
}

/**
 * Signs and sends one client request, applying DESIGN.md's retry rules and nothing more:
 * - connection failures before any byte left: re-sign and retry with capped backoff within a deadline;
 * - 401 FAILED: fresh token, re-sign with a new timestamp and nonce, send once more;
 * - anything after bytes were sent without an answer: never resent (sidecar.upstream.outcome_unknown).
 * Every attempt gets its own timestamp and nonce (spec 5.2: "including retries").
 */
export async function sendSigned(deps: SignedSendDeps, request: SignedRequest): Promise<SignedResult> {
  const now = deps.now ?? Date.now;
  const giveUpAt = performance.now() + deps.connectRetryDeadlineMs;
  const progress = request.progress ?? { sent: 0 };
  let token = deps.tokens.usableToken() ?? (await deps.tokens.token());
  let tokenRetried = false;
  let connectFailures = 0;
  for (;;) {
    const { outcome, signed } = await attempt(deps, request, token.accessToken.reveal(), now());
    if (outcome.kind === 'not_sent') {
      const delay = backoffDelayMs(connectFailures++, 100, 2_000);
      // A refused, unresolvable or timed-out connection may heal; a certificate the sidecar does not trust
      // will not, so it is answered at once (still retryable: nothing was sent).
      if (!outcome.transient || performance.now() + delay >= giveUpAt) throw sidecarErrors.upstreamUnreachable(outcome.error);
      deps.metrics.retry('connect_failed');
      await sleep(delay);
      continue;
    }
    progress.sent++;
    if (outcome.kind === 'sent_no_answer') throw sidecarErrors.outcomeUnknown(outcome.timedOut ? 504 : 502, outcome.error);
    const { response } = outcome;
    const code = gatewayCode(response);
    observeAnswer(deps.metrics, response, code, now());
    const result = { response, gatewayCode: code, attempts: progress.sent, signed };
    if (!isTokenRejection(response, code) || tokenRetried) return result;
    tokenRetried = true;
    try {
      token = await deps.tokens.tokenAfterRejection(token.generation);
    } catch {
      // No fresh token to be had: the gateway's own 401 FAILED goes back. It is the true answer (the gateway
      // refused the token and did nothing), whereas a sidecar error would hide that the request did reach it.
      return result;
    }
    deps.metrics.retry('token_rejected');
  }
}

async function attempt(deps: SignedSendDeps, request: SignedRequest, bearer: string, nowMs: number): Promise<Attempt> {
  const fullUrl = signedUrl(deps.base, request.target);
  const timestamp = unixTimestamp(nowMs);
  const nonce = newNonce();
  const started = performance.now();
  const signature = await deps.signer.sign(
    signingString({ method: 'POST', fullUrl, timestamp, nonce, data: request.envelope.data }),
  );
  deps.metrics.signed((performance.now() - started) / 1000);
  const sentAt = performance.now();
  const headers: Record<string, string> = {
    'content-type': 'application/json',
    authorization: `Bearer ${bearer}`,
    'x-timestamp': timestamp,
    'x-nonce': nonce,
    'x-signature': signature,
  };
  // Copied in rather than spread first: spreading a header map built at run time, then adding the literal's
  // keys, made V8 build a dictionary object for every request (about 5 us). The sidecar's values still win.
  const clientHeaders = request.headers;
  for (const name of Object.keys(clientHeaders)) if (!Object.hasOwn(headers, name)) headers[name] = clientHeaders[name]!;
  const outcome = await deps.forwarder.send({ path: upstreamPath(deps.base, request.target), headers, body: request.envelope.json });
  if (outcome.kind !== 'not_sent') deps.metrics.gatewayRoundTrip(request.route, (performance.now() - sentAt) / 1000);
  return { outcome, signed: { fullUrl, timestamp, nonce } };
}

function observeAnswer(metrics: SidecarMetrics, response: UpstreamResponse, code: string | undefined, nowMs: number): void {
  const label = errorLabel(response.status, code);
  if (label) metrics.gatewayError(label);
  const date = response.headers.date;
  const gatewayMs = typeof date === 'string' ? parseHttpDate(date) : Number.NaN;
  // The Date header is truncated to the second, so the gateway's clock read somewhere in [date, date + 1 s):
  // the midpoint makes the estimate unbiased (error +/- 0.5 s, enough to spot the skews of seconds that break
  // the timestamp window). Without it the gauge would show about -0.5 s against a perfectly synced gateway.
  if (!Number.isNaN(gatewayMs)) metrics.clockSkew((gatewayMs + DATE_RESOLUTION_MS / 2 - nowMs) / 1000);
}

// The gateway's Date header changes once a second: parsing each new value once saves a microsecond per answer.
const parseHttpDate = memoizeLast(Date.parse);
