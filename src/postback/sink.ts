// Where a verified postback goes: delivered to the application at once (`direct`), or kept in the inbox for the
// delivery worker (`queued`). The delivery module (delivery.ts) builds one of them from the settings; the receiver's
// handler only hands postbacks to it.
import type { PostbackMetrics } from '../observability/postback-metrics.js';
import type { TraceContext, TraceSpan, Tracing } from '../observability/tracing.js';
import { isSuccessStatus } from '../upstream/http-status.js';
import { deliveryHeaders, type ApplicationClient } from './application-client.js';
import { orderKeyOf, postbackIdOf, type PostbackInbox } from './inbox.js';
import { postbackRefusals, type PostbackRefusal } from './refusal.js';
import type { VerifiedPostback } from './verify-postback.js';

/** The postback's arrival, as the sink needs it. */
export interface Arrival {
  /** The receive's request id: sent on as X-Request-Id. */
  readonly requestId: string;
  /** The receive span's context (tracing on): the delivery is traced under it. */
  readonly trace: TraceContext | undefined;
  /** Aborted when the receiver stops waiting for the postbacks it holds open (shutdown): `direct` gives up then. */
  readonly stopping: AbortSignal;
}

/** What the log line says of the delivery. */
export interface DeliveryReport {
  /** The postback's id (X-Postback-Id, webhook-id). */
  readonly postbackId: string;
  /** `direct`: the application's status, or why there is none (logged as `internalStatus`, `forwardFailure`). */
  readonly applicationStatus?: number | undefined;
  readonly deliveryFailure?: string | undefined;
}

export type Handed =
  /**
   * Delivered (`forwarded`: the application answered 2xx), or kept in the inbox (accepted, or there already:
   * duplicate).
   */
  | {
      readonly kind: 'taken';
      readonly outcome: 'forwarded' | 'accepted' | 'duplicate';
      readonly report: DeliveryReport;
    }
  /** Not taken: the sender is asked to deliver it again. */
  | { readonly kind: 'refused'; readonly refusal: PostbackRefusal; readonly report: DeliveryReport };

export interface PostbackSink {
  /** Rejects only when it cannot tell (the state store failed): nothing was kept then. */
  hand(postback: VerifiedPostback, arrival: Arrival): Promise<Handed>;
}

/** `direct`: one delivery to the application now; anything but a 2xx asks the gateway to redeliver. */
export function directSink(deps: {
  readonly application: ApplicationClient;
  readonly metrics: PostbackMetrics;
  readonly tracing?: Tracing | undefined;
}): PostbackSink {
  return {
    async hand(postback, { requestId, trace, stopping }) {
      const span = deps.tracing?.enabled ? deps.tracing.startSpan('postback delivery', 'client', trace) : undefined;
      const traceHeaders = span?.context === undefined ? undefined : deps.tracing?.headers(span.context);
      const postbackId = postbackIdOf(postback.digest);
      const result = await deps.application.deliver(postback, requestId, stopping, traceHeaders);
      if (span !== undefined) endDelivery(span, result.status, result.failure);
      deps.metrics.forwarded(result.seconds);
      const report = { postbackId, applicationStatus: result.status, deliveryFailure: result.failure };
      if (isSuccessStatus(result.status)) {
        return { kind: 'taken', outcome: 'forwarded', report };
      }
      const why =
        result.status === undefined
          ? `could not be delivered (${result.failure ?? 'error'})`
          : `answered ${result.status}`;
      const refusal = postbackRefusals.deliveryFailed(`the application ${why}; deliver it again later`);
      return { kind: 'refused', refusal, report };
    },
  };
}

/**
 * `queued`: appended to the inbox, answered at once; the delivery worker delivers it, those with the same
 * `orderField` value (one transaction's) in arrival order. The append is idempotent (the postback's id is its
 * payload's digest): a copy that arrives after an append whose answer was lost (a 503) is `duplicate`, and its 200
 * waits for the replicas like the first append did.
 */
export function inboxSink(deps: {
  readonly inbox: PostbackInbox;
  readonly orderField: string;
  readonly nowMs: () => number;
  readonly tracing?: Tracing | undefined;
}): PostbackSink {
  return {
    async hand(postback, { requestId, trace }) {
      const postbackId = postbackIdOf(postback.digest);
      // Traced: the application's spans join the arrival's trace, whenever the delivery happens.
      const traceHeaders =
        trace === undefined || deps.tracing?.enabled !== true ? undefined : deps.tracing.headers(trace);
      const outcome = await deps.inbox.append(
        {
          id: postbackId,
          payload: postback.payload.toString('utf8'),
          headers: deliveryHeaders(postback, requestId, traceHeaders),
          orderKey: orderKeyOf(postback.payload, deps.orderField, postbackId),
        },
        deps.nowMs(),
      );
      return { kind: 'taken', outcome, report: { postbackId } };
    },
  };
}

/** The delivery span: the application's status, or why there is none; anything but a 2xx is an error. */
function endDelivery(span: TraceSpan, status: number | undefined, failure: string | undefined): void {
  span.setAttributes({ 'http.response.status_code': status, 'sidecar.cause_code': failure });
  if (!isSuccessStatus(status)) span.fail(failure ?? String(status));
  span.end();
}
