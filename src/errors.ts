// One error class for everything the sidecar answers by itself, and one place that turns it into a response.
// `retryable` is a promise to the client: true only when the gateway certainly did not receive the request.

export type SidecarErrorCode =
  | 'sidecar.request.forbidden_host'
  | 'sidecar.request.browser_origin'
  | 'sidecar.request.expectation_failed'
  | 'sidecar.route.not_found'
  | 'sidecar.method.not_allowed'
  | 'sidecar.body.invalid_json'
  | 'sidecar.body.not_object'
  | 'sidecar.body.too_large'
  | 'sidecar.body.unsupported_media_type'
  | 'sidecar.body.incomplete'
  | 'sidecar.body.budget_exhausted'
  | 'sidecar.overloaded'
  | 'sidecar.token.unavailable'
  | 'sidecar.signer.unavailable'
  | 'sidecar.upstream.unreachable'
  | 'sidecar.upstream.outcome_unknown'
  | 'sidecar.shutdown.draining'
  | 'sidecar.idempotency.key_invalid'
  | 'sidecar.idempotency.key_required'
  | 'sidecar.idempotency.in_progress'
  | 'sidecar.idempotency.key_reused'
  | 'sidecar.idempotency.unavailable'
  | 'sidecar.idempotency.record_unverified'
  | 'sidecar.idempotency.claim_lost'
  | 'sidecar.limit.exceeded'
  | 'sidecar.limit.amount_invalid'
  | 'sidecar.limit.unavailable'
  | 'sidecar.internal';

export interface SidecarErrorBody {
  code: SidecarErrorCode;
  message: string;
  retryable: boolean;
  /** sidecar.limit.exceeded: the rule and its window that refused the payment. */
  rule?: string;
  window?: string;
}

/** What an error's body says besides its code, message and flag. */
export type SidecarErrorDetails = Pick<SidecarErrorBody, 'rule' | 'window'>;

export class SidecarError extends Error {
  override readonly name = 'SidecarError';
  readonly details: SidecarErrorDetails | undefined;
  /**
   * The gateway certainly did not receive the request: every retryable error, and refusals that sending again cannot
   * cure (a money limit's). Such an error frees the request's Idempotency-Key and its limit reservation.
   */
  readonly nothingSent: boolean;

  constructor(
    readonly code: SidecarErrorCode,
    readonly status: number,
    message: string,
    readonly retryable: boolean,
    options?: { cause?: unknown; details?: SidecarErrorDetails; nothingSent?: true },
  ) {
    super(message, options);
    this.details = options?.details;
    this.nothingSent = retryable || options?.nothingSent === true;
  }

  toBody(): SidecarErrorBody {
    return { code: this.code, message: this.message, retryable: this.retryable, ...this.details };
  }
}

/** Factories keep statuses and retryable flags in one table instead of at every throw site. */
export const sidecarErrors = {
  // Who may call (egress/caller-check.ts): refused on the headers alone, before the body is read; nothing was sent.
  forbiddenHost: () =>
    new SidecarError(
      'sidecar.request.forbidden_host',
      421,
      'Host is not a name this sidecar answers to (localhost, a loopback address, SIDECAR_LISTEN_ALLOWED_HOSTS)',
      true,
    ),
  browserOrigin: () =>
    new SidecarError(
      'sidecar.request.browser_origin',
      403,
      'requests made by a web browser (Origin, Sec-Fetch-Site) are refused: the sidecar signs for internal services only',
      true,
    ),
  // RFC 9110 10.1.1: an expectation other than 100-continue is one the sidecar cannot meet; nothing was sent.
  expectationFailed: () =>
    new SidecarError(
      'sidecar.request.expectation_failed',
      417,
      'Expect may only be 100-continue; send the request again without another expectation',
      true,
    ),
  routeNotFound: () => new SidecarError('sidecar.route.not_found', 404, 'no signed route at this path', true),
  methodNotAllowed: (allowed: string) =>
    new SidecarError('sidecar.method.not_allowed', 405, `only ${allowed} is allowed on this path`, true),
  unsupportedMediaType: () =>
    new SidecarError(
      'sidecar.body.unsupported_media_type',
      415,
      'Content-Type must be application/json (charset utf-8, if any)',
      true,
    ),
  invalidJson: () => new SidecarError('sidecar.body.invalid_json', 400, 'body is not valid JSON', true),
  notObject: () => new SidecarError('sidecar.body.not_object', 400, 'body must be a JSON object', true),
  tooLarge: (limit: number) =>
    new SidecarError('sidecar.body.too_large', 413, `body exceeds the limit of ${limit} bytes`, true),
  // The client half-closed before its whole body arrived (inbound/body.ts); after a reset no one is left to answer.
  bodyIncomplete: () =>
    new SidecarError('sidecar.body.incomplete', 400, 'the request body was not received completely', true),
  bodyBudgetExhausted: () =>
    new SidecarError(
      'sidecar.body.budget_exhausted',
      503,
      'the sidecar is holding as many large bodies as it may at once; nothing was sent: send it again shortly',
      true,
    ),
  // The process is near its memory budget (docs/operations.md, "Memory"): refused before its body is read.
  overloaded: () =>
    new SidecarError(
      'sidecar.overloaded',
      503,
      'the sidecar is near its memory limit and takes no new request for a moment; nothing was sent: send it again shortly',
      true,
    ),
  tokenUnavailable: () =>
    new SidecarError('sidecar.token.unavailable', 503, 'no valid access token yet; try again shortly', true),
  // The PKCS#11 token (an HSM or cloud KMS) cannot sign now: the request was never signed, so never sent.
  signerUnavailable: (cause?: unknown) =>
    new SidecarError(
      'sidecar.signer.unavailable',
      503,
      'the signing key (HSM or KMS) is unavailable; nothing was sent: send it again shortly',
      true,
      { cause },
    ),
  upstreamUnreachable: (cause: unknown) =>
    new SidecarError('sidecar.upstream.unreachable', 502, 'could not connect to the gateway; nothing was sent', true, {
      cause,
    }),
  outcomeUnknown: (status: 502 | 504, cause: unknown) =>
    new SidecarError(
      'sidecar.upstream.outcome_unknown',
      status,
      'the request was sent but no answer came back; the transaction may exist: check before sending again',
      false,
      { cause },
    ),
  shuttingDown: () =>
    new SidecarError(
      'sidecar.shutdown.draining',
      503,
      'the sidecar is shutting down and did not send this request; send it again',
      true,
    ),
  // Idempotency keys (docs/idempotency.md). Nothing was sent for any of these; key_reused is still not retryable:
  // the key already stands for another request, and sending this one again with it can never succeed.
  idempotencyKeyInvalid: () =>
    new SidecarError(
      'sidecar.idempotency.key_invalid',
      400,
      'Idempotency-Key must be 1 to 255 visible ASCII characters',
      true,
    ),
  idempotencyKeyRequired: () =>
    new SidecarError('sidecar.idempotency.key_required', 428, 'this sidecar requires an Idempotency-Key header', true),
  idempotencyInProgress: () =>
    new SidecarError(
      'sidecar.idempotency.in_progress',
      409,
      'a request with this Idempotency-Key is still in progress; retry shortly for its answer',
      true,
    ),
  idempotencyKeyReused: () =>
    new SidecarError(
      'sidecar.idempotency.key_reused',
      422,
      'this Idempotency-Key was used for a different request (route, query or body); use a new key',
      false,
    ),
  idempotencyUnavailable: (cause: unknown) =>
    new SidecarError(
      'sidecar.idempotency.unavailable',
      503,
      'the idempotency store is unreachable; the request was not sent unprotected: send it again shortly',
      true,
      { cause },
    ),
  // This replica was paused or cut off past its claim's lease, and a retry took the key over: this request sent
  // nothing (the fence before the first byte failed). The key's answer is the other request's.
  idempotencyClaimLost: () =>
    new SidecarError(
      'sidecar.idempotency.claim_lost',
      409,
      "this request lost its Idempotency-Key's claim to a retry while this replica was stalled, and sent nothing; retry shortly with the same key for the key's answer",
      true,
    ),
  // Not retryable, and nothing is sent: the record may stand in for a real payment's answer that was overwritten.
  idempotencyRecordUnverified: () =>
    new SidecarError(
      'sidecar.idempotency.record_unverified',
      500,
      "this Idempotency-Key's stored record failed its integrity check (docs/idempotency.md); nothing was sent: the payment may exist, check it with the gateway before sending it again under a new key",
      false,
    ),
  // Money limits (docs/limits.md). Nothing was sent for any of these. exceeded is not retryable: the same payment
  // is refused again until the window has room or the rule is raised.
  limitExceeded: (rule: string, window: string) =>
    new SidecarError(
      'sidecar.limit.exceeded',
      403,
      window === 'payment'
        ? `the payment is larger than limit rule "${rule}" allows for one payment; nothing was sent`
        : `the payment would take limit rule "${rule}" past its ${window} window; nothing was sent`,
      false,
      { details: { rule, window }, nothingSent: true },
    ),
  limitAmountInvalid: (message: string) =>
    new SidecarError('sidecar.limit.amount_invalid', 400, `${message}; nothing was sent`, true),
  limitUnavailable: (cause: unknown) =>
    new SidecarError(
      'sidecar.limit.unavailable',
      503,
      'the money limits could not be checked (the state store is away or busy); nothing was sent: send it again shortly',
      true,
      { cause },
    ),
  internal: (cause: unknown) =>
    // Not retryable: an unexpected failure cannot prove the gateway saw nothing.
    new SidecarError('sidecar.internal', 500, 'internal error in the sidecar', false, { cause }),
} as const;

/**
 * What a log line may say of an unexpected error: its kind (TypeError, AbortError...), never its message, which may
 * quote a payload, a key or a credential.
 */
export function errorName(err: unknown): string {
  return err instanceof Error ? err.name : 'error';
}

/** Anything unexpected becomes a generic 500: internal text never reaches clients. */
export function asSidecarError(err: unknown): SidecarError {
  return err instanceof SidecarError ? err : sidecarErrors.internal(err);
}

/** Raised by config loading: `setting` names the env var so the operator knows what to fix. */
export class ConfigError extends Error {
  override readonly name = 'ConfigError';

  constructor(
    readonly setting: string,
    readonly reason: string,
  ) {
    super(`${setting}: ${reason}`);
  }
}
