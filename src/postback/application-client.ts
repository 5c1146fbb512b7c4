// The application client: delivers a verified payload to the application (SIDECAR_POSTBACK_FORWARD_URL), its exact
// decoded bytes as plain JSON, with headers that say how it was verified, its id, and (with
// SIDECAR_POSTBACK_FORWARD_SECRET_FILE set) the Standard Webhooks signature of this attempt. No header of the sender
// is passed on, so a sender's own X-Postback-* claims never arrive.
import { Agent, request } from 'undici';
import type { DeliverySigner } from './delivery-signing.js';
import { postbackIdOf } from './inbox.js';
import type { VerifiedPostback } from './verify-postback.js';

export interface ApplicationAnswer {
  /** The application's status; undefined when it could not be reached or timed out. */
  readonly status: number | undefined;
  /** Why there is no status (errno or undici code, never a message that could quote a URL's secret). */
  readonly failure: string | undefined;
  readonly seconds: number;
  /** The answer's Retry-After in seconds, when it gave one as a number. */
  readonly retryAfterSeconds?: number;
}

export interface ApplicationClient {
  /** `traceHeaders`: the delivery span's traceparent (tracing on), so the application continues the trace. */
  deliver(
    postback: VerifiedPostback,
    requestId: string,
    signal: AbortSignal,
    traceHeaders?: Readonly<Record<string, string>>,
  ): Promise<ApplicationAnswer>;
  /**
   * One POST of `body` with `headers` (the queued delivery keeps those it was given) plus the postback's `id`, as
   * X-Postback-Id and, signed, as webhook-id: the same on every attempt, so the application can deduplicate.
   */
  post(
    id: string,
    body: Buffer | string,
    headers: Readonly<Record<string, string>>,
    signal: AbortSignal,
  ): Promise<ApplicationAnswer>;
  /** Installs a rotated SIDECAR_POSTBACK_FORWARD_SECRET_FILE; ignored when deliveries are not signed. */
  replaceSecret: DeliverySigner['replaceSecret'];
  close(): Promise<void>;
}

/** Connections kept to the application: postbacks are few, and each waits for its answer. */
const MAX_CONNECTIONS = 16;

export function deliveryHeaders(
  postback: VerifiedPostback,
  requestId: string,
  traceHeaders?: Readonly<Record<string, string>>,
): Record<string, string> {
  const headers: Record<string, string> = {
    ...traceHeaders,
    'content-type': 'application/json',
    'x-postback-verified': postback.verified,
    'x-request-id': requestId,
  };
  if (postback.timestamp !== undefined) headers['x-postback-timestamp'] = postback.timestamp;
  if (postback.nonce !== undefined) headers['x-postback-nonce'] = postback.nonce;
  return headers;
}

/**
 * One attempt's signal: aborted by `stopping` (shutdown) or after `timeoutMs`, and detached from `stopping` by
 * done(). Not AbortSignal.any([stopping, ...]): on Node 20 every call leaves an entry on the long-lived `stopping`
 * signal that is never removed (nodejs/node#55351), about 55 bytes per postback for the life of the process.
 */
function attemptSignal(stopping: AbortSignal, timeoutMs: number): { signal: AbortSignal; done: () => void } {
  const controller = new AbortController();
  const stop = () => controller.abort(new DOMException('the receiver is stopping', 'AbortError'));
  const timer = setTimeout(
    () => controller.abort(new DOMException('the delivery timed out', 'TimeoutError')),
    timeoutMs,
  );
  if (stopping.aborted) stop();
  else stopping.addEventListener('abort', stop, { once: true });
  return {
    signal: controller.signal,
    done: () => {
      clearTimeout(timer);
      stopping.removeEventListener('abort', stop);
    },
  };
}

/** `signer`: set when SIDECAR_POSTBACK_FORWARD_SECRET_FILE is; each attempt is then signed with its own timestamp. */
export function createApplicationClient(url: string, timeoutMs: number, signer?: DeliverySigner): ApplicationClient {
  // Its own pool: a delivery never takes a connection from the gateway client, and the other way round.
  const agent = new Agent({ connections: MAX_CONNECTIONS, connect: { timeout: timeoutMs } });
  const post: ApplicationClient['post'] = async (id, body, given, signal) => {
    // Set last: kept headers (an inbox entry written before an upgrade) cannot override the id or the signature.
    const headers = { ...given, 'x-postback-id': id, ...signer?.headers(id, body) };
    const started = process.hrtime.bigint();
    const seconds = () => Number(process.hrtime.bigint() - started) / 1e9;
    const abort = attemptSignal(signal, timeoutMs);
    try {
      const res = await request(url, {
        method: 'POST',
        dispatcher: agent,
        headers,
        body,
        signal: abort.signal,
        headersTimeout: timeoutMs,
        bodyTimeout: timeoutMs,
      });
      // The answer's body is not used; it is read (bounded) so that the connection can be reused.
      await res.body.dump({ limit: 64 * 1024 });
      const retryAfter = retryAfterSeconds(res.headers['retry-after']);
      return {
        status: res.statusCode,
        failure: undefined,
        seconds: seconds(),
        ...(retryAfter === undefined ? {} : { retryAfterSeconds: retryAfter }),
      };
    } catch (err) {
      return { status: undefined, failure: failureCode(err), seconds: seconds() };
    } finally {
      abort.done();
    }
  };
  return {
    deliver: (postback, requestId, signal, traceHeaders) =>
      post(postbackIdOf(postback.digest), postback.payload, deliveryHeaders(postback, requestId, traceHeaders), signal),
    post,
    replaceSecret: (secret) => signer?.replaceSecret(secret),
    close: () => agent.close(),
  };
}

function retryAfterSeconds(value: string | string[] | undefined): number | undefined {
  const text = Array.isArray(value) ? value[0] : value;
  return text !== undefined && /^\d{1,9}$/.test(text.trim()) ? Number(text.trim()) : undefined;
}

function failureCode(err: unknown): string {
  const e = err as { code?: unknown; name?: unknown; cause?: { code?: unknown } };
  if (e.name === 'TimeoutError') return 'timeout';
  if (e.name === 'AbortError') return 'aborted';
  const code = e.code ?? e.cause?.code;
  return typeof code === 'string' ? code : 'error';
}
