import type { IncomingHttpHeaders } from 'node:http';
import type { BaseAddress } from '../config/base-url.js';
import type { Secret } from '../config/secret.js';
import type { SidecarMetrics } from '../observability/metrics.js';
import type { TraceContext, Tracing } from '../observability/tracing.js';
import { signedUrl, upstreamPath, type RequestTarget } from '../signing/canonical-url.js';
import type { ClockCorrection } from '../signing/clock-correction.js';
import { newNonce } from '../signing/nonce.js';
import type { Signer } from '../signing/signer.js';
import { signingString, unixTimestamp } from '../signing/signing-string.js';
import type { ExchangeRequest, SendableCopy, SignCopy } from './gateway-exchange.js';
import { callerTraceContext } from './headers.js';

/** A client request as the gateway exchange sends it: the route's target, the wrapped body, the forwarded headers. */
export interface SignedRequest extends ExchangeRequest {
  readonly target: RequestTarget;
  readonly envelope: { readonly data: string; readonly json: string };
  /** The client headers sent on (headers.ts) and the request id; the sidecar's own are added to each copy. */
  readonly headers: Record<string, string>;
  /** The client's request headers, whose trace context goes on when the sidecar traces nothing itself. */
  readonly callerHeaders: IncomingHttpHeaders;
}

/** One signed copy, and the parts of its signing string, for the diagnostic log on signature.verify.failed. */
export interface SignedCopy extends SendableCopy {
  readonly fullUrl: string;
  readonly timestamp: string;
  readonly nonce: string;
}

export interface SigningDeps {
  readonly base: BaseAddress;
  readonly signer: Signer;
  /** Signing time (SIDECAR_CLOCK_SKEW_CORRECTION). */
  readonly clock: Pick<ClockCorrection, 'timestampMs'>;
  readonly metrics: Pick<SidecarMetrics, 'signed'>;
  readonly now?: (() => number) | undefined;
  readonly tracing: Tracing;
  /** SIDECAR_TRACE_PROPAGATE_UPSTREAM: the gateway sees a trace context (upstreamTrace). */
  readonly propagateUpstream: boolean;
}

/** How every copy of a client request is signed (spec 5.2): made once, the gateway exchange calls it per copy. */
export function requestSigning(deps: SigningDeps): SignCopy<SignedRequest, SignedCopy> {
  const now = deps.now ?? Date.now;
  return async (request, bearer, trace) => {
    const fullUrl = signedUrl(deps.base, request.target);
    const timestamp = unixTimestamp(deps.clock.timestampMs(now()));
    const nonce = newNonce();
    const started = performance.now();
    let signature: string;
    try {
      signature = await deps.signer.sign(
        signingString({ method: 'POST', fullUrl, timestamp, nonce, data: request.envelope.data }),
      );
    } catch (error) {
      deps.metrics.signed(deps.signer.kind, 'failure', (performance.now() - started) / 1000);
      throw error;
    }
    deps.metrics.signed(deps.signer.kind, 'success', (performance.now() - started) / 1000);
    const headers = signedHeaders(request.headers, bearer, timestamp, nonce, signature);
    if (deps.propagateUpstream) Object.assign(headers, upstreamTrace(deps.tracing, request.callerHeaders, trace));
    return {
      path: upstreamPath(deps.base, request.target),
      headers,
      body: request.envelope.json,
      fullUrl,
      timestamp,
      nonce,
    };
  };
}

function signedHeaders(
  forwarded: Record<string, string>,
  bearer: Secret,
  timestamp: string,
  nonce: string,
  signature: string,
): Record<string, string> {
  // The sidecar's values win over any a client sent. Not `{ ...forwarded, ... }`: V8 before 12.x (Node 20) makes an
  // object spread followed by more properties a dictionary, about 1 KB of heap a copy (docs/performance.md).
  return Object.assign({}, forwarded, {
    'content-type': 'application/json',
    authorization: `Bearer ${bearer.reveal()}`,
    'x-timestamp': timestamp,
    'x-nonce': nonce,
    'x-signature': signature,
  });
}

/**
 * The trace context the gateway sees (SIDECAR_TRACE_PROPAGATE_UPSTREAM on): with tracing on, the copy's own attempt
 * span's, never the caller's (whose traceparent was filtered out, headers.ts); with tracing off the sidecar makes no
 * span, and the caller's context goes on unchanged.
 */
function upstreamTrace(
  tracing: Tracing,
  callerHeaders: IncomingHttpHeaders,
  attempt: TraceContext | undefined,
): Readonly<Record<string, string>> | undefined {
  if (!tracing.enabled) return callerTraceContext(callerHeaders);
  return attempt === undefined ? undefined : tracing.headers(attempt);
}
