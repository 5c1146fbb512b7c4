import type { IncomingHttpHeaders } from 'node:http';
import { sidecarErrors, type SidecarError } from '../errors.js';
import { requestFingerprint } from '../idempotency/fingerprint.js';
import type { Claim, IdempotencyKeeper, Ticket } from '../idempotency/keeper.js';
import { IDEMPOTENCY_KEY_HEADER, idempotencyKey, type IdempotencyKey } from '../idempotency/key.js';
import { errorAnswer, type KeptAnswer } from '../idempotency/record.js';
import type { Logger } from '../observability/log.js';
import type { SidecarMetrics } from '../observability/metrics.js';
import { StateStoreUnavailableError } from '../state/state-store.js';
import type { RequestOutcome } from './request-log.js';
import type { RouteMatch } from './routes.js';

export interface IdempotencyDeps {
  readonly keeper: Pick<IdempotencyKeeper, 'claim' | 'complete' | 'release'>;
  /** SIDECAR_IDEMPOTENCY_REQUIRED: a signed request without a key is refused (428). */
  readonly required: boolean;
}

/** What the record keeps once the caller has its answer: that answer, or nothing (release: nothing was sent). */
export type Keep = { readonly kind: 'store'; readonly answer: KeptAnswer } | { readonly kind: 'release' };

/** One request's key from the header to the record's last write (shared by handle and serve in handler.ts). */
export interface RequestKey {
  key?: IdempotencyKey;
  /** Set once this request holds the key: it must then complete or release it. */
  ticket?: Ticket;
}

interface Parts {
  readonly idempotency: IdempotencyDeps;
  readonly metrics: Pick<SidecarMetrics, 'idempotency'>;
  readonly log: Logger;
}

/** The request's key (undefined: none); throws key_invalid (malformed) or key_required (missing, when required). */
export function readIdempotencyKey(parts: Parts, headers: IncomingHttpHeaders): IdempotencyKey | undefined {
  try {
    const key = idempotencyKey(headers[IDEMPOTENCY_KEY_HEADER]);
    if (key === undefined && parts.idempotency.required) throw sidecarErrors.idempotencyKeyRequired();
    return key;
  } catch (err) {
    const required = (err as SidecarError).code === 'sidecar.idempotency.key_required';
    parts.metrics.idempotency(required ? 'key_required' : 'key_invalid');
    throw err;
  }
}

export type Admitted = Extract<Claim, { kind: 'new' | 'replayed' | 'abandoned' }>;

/**
 * Claims the key for this request (after its body was read and validated). `new`: send it; `replayed` and
 * `abandoned`: answer from the record. Throws 409 in_progress, 422 key_reused, 503 unavailable: none sends.
 */
export async function claimIdempotencyKey(
  parts: Parts,
  key: IdempotencyKey,
  match: Extract<RouteMatch, { kind: 'signed' }>,
  payload: Buffer,
  requestId: string,
): Promise<Admitted> {
  const fingerprint = requestFingerprint(match.route, match.target.query, payload);
  let claim: Claim;
  try {
    claim = await parts.idempotency.keeper.claim(key, fingerprint, requestId);
  } catch (err) {
    if (!(err instanceof StateStoreUnavailableError)) throw err;
    // Sending without the record could turn the caller's retry into a second payment: refused instead.
    parts.metrics.idempotency('unavailable');
    throw sidecarErrors.idempotencyUnavailable(err);
  }
  parts.metrics.idempotency(claim.kind);
  if (claim.kind === 'in_progress') throw sidecarErrors.idempotencyInProgress();
  if (claim.kind === 'key_reused') throw sidecarErrors.idempotencyKeyReused();
  if (claim.kind === 'abandoned') {
    // For reconciliation: the request that claimed the key and may have reached the gateway before its replica died.
    parts.log.warn(
      { event: 'idempotency.abandoned', requestId, abandonedRequestId: claim.owner, idempotencyKeySha256: key.sha256 },
      'an earlier request with this key never recorded its answer; answered outcome_unknown, not sent again',
    );
  }
  return claim;
}

/** What an error answer leaves in the record: nothing when it promises that nothing was sent, else itself. */
export function keepError(error: SidecarError): Keep {
  return error.retryable ? { kind: 'release' } : { kind: 'store', answer: errorAnswer(error) };
}

/**
 * Writes the record for what the caller really got. When shutdown answered first, that is shutdown's answer:
 * draining (never sent: release) or outcome_unknown (it may have been sent: kept, never released).
 */
export async function settleIdempotencyKey(
  deps: IdempotencyDeps,
  ticket: Ticket,
  keep: Keep,
  outcome: RequestOutcome,
): Promise<void> {
  if (outcome.late !== undefined) {
    keep =
      outcome.code === 'sidecar.shutdown.draining'
        ? { kind: 'release' }
        : keepError(sidecarErrors.outcomeUnknown(504, 'shutdown'));
  }
  await (keep.kind === 'release' ? deps.keeper.release(ticket) : deps.keeper.complete(ticket, keep.answer));
}
