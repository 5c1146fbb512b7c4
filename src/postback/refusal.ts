// Every answer the receiver gives the gateway other than 200, in one table: status, code, retryable and the
// metric outcome. The body has the sidecar's own shape ({code, message, retryable}); here `retryable` tells the
// sender whether delivering the same postback again can succeed.
import type { PostbackOutcome } from '../observability/metric-names.js';

export type { PostbackOutcome };

export type PostbackErrorCode =
  | 'postback.signature.invalid'
  | 'postback.signature.missing'
  | 'postback.timestamp.expired'
  | 'postback.timestamp.future'
  | 'postback.source.forbidden'
  | 'postback.body.invalid'
  | 'postback.body.too_large'
  | 'postback.route.not_found'
  | 'postback.method.not_allowed'
  | 'postback.forward.failed'
  | 'postback.forward.in_progress'
  | 'postback.state.unavailable'
  | 'postback.receiver.busy'
  | 'postback.receiver.overloaded'
  | 'postback.internal';

/** Seconds the gateway is asked to wait before redelivering after a 503. */
export const RETRY_AFTER_SECONDS = 5;

export class PostbackRefusal extends Error {
  override readonly name = 'PostbackRefusal';

  constructor(
    readonly code: PostbackErrorCode,
    readonly status: number,
    message: string,
    readonly outcome: PostbackOutcome,
    options?: { cause?: unknown },
  ) {
    super(message, options);
  }

  /** 503s ask for a redelivery; every other refusal would be refused again. */
  get retryable(): boolean {
    return this.status === 503;
  }

  toBody(): { code: PostbackErrorCode; message: string; retryable: boolean } {
    return { code: this.code, message: this.message, retryable: this.retryable };
  }
}

const refusal =
  (code: PostbackErrorCode, status: number, outcome: PostbackOutcome) =>
  (message: string, cause?: unknown): PostbackRefusal =>
    new PostbackRefusal(code, status, message, outcome, cause === undefined ? undefined : { cause });

/** Factories: the statuses and outcomes stay in this one table. Messages never quote a header or the body. */
export const postbackRefusals = {
  signatureInvalid: refusal('postback.signature.invalid', 401, 'signature_invalid'),
  signatureMissing: refusal('postback.signature.missing', 401, 'signature_missing'),
  timestampExpired: refusal('postback.timestamp.expired', 401, 'timestamp_expired'),
  timestampFuture: refusal('postback.timestamp.future', 401, 'timestamp_future'),
  sourceForbidden: () =>
    new PostbackRefusal(
      'postback.source.forbidden',
      403,
      'this source address may not deliver postbacks',
      'source_forbidden',
    ),
  bodyInvalid: refusal('postback.body.invalid', 400, 'body_invalid'),
  tooLarge: (limit: number) =>
    new PostbackRefusal('postback.body.too_large', 413, `body exceeds the limit of ${limit} bytes`, 'too_large'),
  notFound: () =>
    new PostbackRefusal('postback.route.not_found', 404, 'postbacks are received at one path only', 'not_found'),
  methodNotAllowed: () =>
    new PostbackRefusal('postback.method.not_allowed', 405, 'only POST is allowed', 'method_not_allowed'),
  deliveryFailed: refusal('postback.forward.failed', 503, 'forward_failed'),
  inProgress: () =>
    new PostbackRefusal(
      'postback.forward.in_progress',
      503,
      'a copy of this postback is being delivered now; deliver it again later',
      'in_flight',
    ),
  stateUnavailable: (cause: unknown) =>
    new PostbackRefusal(
      'postback.state.unavailable',
      503,
      'the state store (replay memory, inbox) is unavailable, so the postback was not taken; deliver it again later',
      'store_unavailable',
      { cause },
    ),
  busy: () =>
    new PostbackRefusal(
      'postback.receiver.busy',
      503,
      'the receiver is holding as many large bodies as it may; deliver it again later',
      'busy',
    ),
  overloaded: () =>
    new PostbackRefusal(
      'postback.receiver.overloaded',
      503,
      'the sidecar is near its memory limit and takes no postback for a moment; deliver it again later',
      'overloaded',
    ),
  internal: (cause: unknown) =>
    new PostbackRefusal('postback.internal', 500, 'internal error in the postback receiver', 'error', { cause }),
} as const;
