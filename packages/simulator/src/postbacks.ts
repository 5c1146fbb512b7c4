// Postback delivery (spec 6). The spec leaves body, signing string and retries open; our documented choices:
// body `{"data": base64(JSON)}` like requests, signing string `POST.<webhook URL>.TS.NONCE.<data>` with the
// simulator's own key, a fresh timestamp and nonce per attempt, exponential backoff until a 2xx.
import { constants, randomBytes, sign } from 'node:crypto';
import type { KeyObject } from 'node:crypto';
import { request } from 'undici';
import { signedUrlFor, parsePublicBase } from './canonical-url.js';
import { sleepUnlessAborted } from './sleep.js';
import { buildSigningString } from './verifier.js';
import type { SimClock } from './clock.js';
import type { SimLogger } from './log.js';
import { reconciliationFields, type Transaction } from './transactions.js';

export interface PostbackRetryOptions {
  /** Delay before the second attempt; doubles after each failure. Default 1000 ms. */
  readonly initialDelayMs?: number;
  /** Ceiling for the backoff. Default 60 000 ms. */
  readonly maxDelayMs?: number;
  /** Give up after this many attempts (0 = never). Default 50. */
  readonly maxAttempts?: number;
  /** Per-attempt timeout. Default 10 000 ms. */
  readonly timeoutMs?: number;
}

export interface PostbackAttempt {
  readonly transactionId: string;
  readonly url: string;
  readonly attempt: number;
  readonly signed: boolean;
  /** RFC 3339 real time of the attempt. */
  readonly at: string;
  readonly status: number | undefined;
  readonly error: string | undefined;
  readonly delivered: boolean;
}

export interface PostbackTarget {
  readonly url: string;
  readonly signed: boolean;
}

export interface PostbackSender {
  send(target: PostbackTarget, tx: Transaction): void;
  attempts(): PostbackAttempt[];
  /**
   * Resolves once a delivery attempt for this transaction has been recorded (at once if one has), after waitMs,
   * or on close, whichever comes first: the payment page waits for it to show what the webhook answered.
   */
  firstAttempt(transactionId: string, waitMs: number): Promise<void>;
  /** Stops retries and aborts attempts in flight. */
  close(): Promise<void>;
}

interface Deps {
  readonly clock: SimClock;
  readonly privateKey: KeyObject;
  readonly logger: SimLogger;
  readonly retry: PostbackRetryOptions;
  /** Test hook; default MAX_POSTBACK_LOG_ENTRIES. */
  readonly maxLogEntries?: number;
}

/** The attempt log keeps the newest entries only, so a simulator left running for weeks stays bounded. */
export const MAX_POSTBACK_LOG_ENTRIES = 10_000;

export function createPostbackSender(deps: Deps): PostbackSender {
  const log: PostbackAttempt[] = [];
  const maxLog = deps.maxLogEntries ?? MAX_POSTBACK_LOG_ENTRIES;
  const abort = new AbortController();
  const running = new Set<Promise<void>>();
  const waiters = new Map<string, Set<() => void>>();
  const record = (a: PostbackAttempt): void => {
    log.push(a);
    if (log.length > maxLog) log.splice(0, log.length - maxLog);
    const waiting = waiters.get(a.transactionId);
    waiters.delete(a.transactionId);
    for (const wake of waiting ?? []) wake();
  };
  const firstAttempt = (transactionId: string, waitMs: number): Promise<void> => {
    if (abort.signal.aborted || log.some((a) => a.transactionId === transactionId)) return Promise.resolve();
    return new Promise((resolve) => {
      const waiting = waiters.get(transactionId) ?? new Set<() => void>();
      waiters.set(transactionId, waiting);
      const wake = (): void => {
        clearTimeout(timer);
        abort.signal.removeEventListener('abort', wake);
        waiting.delete(wake);
        if (waiting.size === 0 && waiters.get(transactionId) === waiting) waiters.delete(transactionId);
        resolve();
      };
      const timer = setTimeout(wake, waitMs);
      abort.signal.addEventListener('abort', wake, { once: true });
      waiting.add(wake);
    });
  };
  const run = (target: PostbackTarget, tx: Transaction): void => {
    const job = deliver(deps, target, tx, abort.signal, record).catch((err: unknown) => {
      // A failure outside the HTTP call (e.g. signing) ends this delivery; it must not crash the process.
      // The message only: an error object may carry the webhook URL (e.g. ERR_INVALID_URL's `input`).
      const reason = err instanceof Error ? err.message : 'unknown error';
      deps.logger.error({ event: 'postback.error', transactionId: tx.id, reason }, 'postback delivery failed');
    });
    running.add(job);
    void job.finally(() => running.delete(job));
  };
  return {
    send: run,
    attempts: () => [...log],
    firstAttempt,
    async close() {
      abort.abort();
      await Promise.allSettled([...running]);
    },
  };
}

/** The postback payload: the final state of the transaction, the fields a vendor needs to reconcile it. */
export function postbackPayload(tx: Transaction): Record<string, string | undefined> {
  return reconciliationFields(tx);
}

async function deliver(
  deps: Deps,
  target: PostbackTarget,
  tx: Transaction,
  signal: AbortSignal,
  record: (a: PostbackAttempt) => void,
): Promise<void> {
  const { initialDelayMs = 1000, maxDelayMs = 60_000, maxAttempts = 50 } = deps.retry;
  const data = Buffer.from(JSON.stringify(postbackPayload(tx)), 'utf8').toString('base64');
  for (let attempt = 1; maxAttempts === 0 || attempt <= maxAttempts; attempt++) {
    if (signal.aborted) return;
    const result = await attemptOnce(deps, target, data, signal);
    const entry = { transactionId: tx.id, url: displayUrl(target.url), attempt, signed: target.signed, ...result };
    record({ ...entry, at: new Date().toISOString(), delivered: isSuccess(result.status) });
    deps.logger.info({ event: 'postback.attempt', ...entry }, 'postback attempt');
    if (isSuccess(result.status)) return;
    const delay = Math.min(initialDelayMs * 2 ** (attempt - 1), maxDelayMs);
    if (!(await sleepUnlessAborted(delay, signal))) return;
  }
  deps.logger.warn({ event: 'postback.abandoned', transactionId: tx.id, url: displayUrl(target.url) }, 'abandoned');
}

/** Origin and path only: webhook URLs often carry a secret in the query or userinfo, and logs get shared. */
export function displayUrl(url: string): string {
  try {
    const parsed = new URL(url);
    return parsed.origin + parsed.pathname;
  } catch {
    return '[unparsable URL]';
  }
}

function isSuccess(status: number | undefined): boolean {
  return status !== undefined && status >= 200 && status < 300;
}

async function attemptOnce(
  deps: Deps,
  target: PostbackTarget,
  data: string,
  signal: AbortSignal,
): Promise<{ status: number | undefined; error: string | undefined }> {
  const body = JSON.stringify({ data });
  const headers: Record<string, string> = { 'content-type': 'application/json' };
  if (target.signed) Object.assign(headers, await signatureHeaders(deps, target.url, data));
  const timeoutMs = deps.retry.timeoutMs ?? 10_000;
  try {
    const res = await request(target.url, {
      method: 'POST',
      headers,
      body,
      signal,
      headersTimeout: timeoutMs,
      bodyTimeout: timeoutMs,
    });
    await res.body.dump();
    return { status: res.statusCode, error: undefined };
  } catch (err) {
    return { status: undefined, error: (err as Error).message };
  }
}

async function signatureHeaders(deps: Deps, url: string, data: string): Promise<Record<string, string>> {
  const timestamp = String(deps.clock.nowSeconds());
  const nonce = randomBytes(16).toString('base64url');
  const parsed = new URL(url);
  const fullUrl = signedUrlFor(parsePublicBase(parsed.origin), parsed.pathname + parsed.search);
  const signingString = buildSigningString({ method: 'POST', fullUrl, timestamp, nonce, data });
  const signature = await new Promise<Buffer>((resolve, reject) => {
    sign(
      'sha256',
      Buffer.from(signingString, 'utf8'),
      { key: deps.privateKey, padding: constants.RSA_PKCS1_PADDING },
      (err, sig) => (err === null ? resolve(sig) : reject(err)),
    );
  });
  return { 'x-timestamp': timestamp, 'x-nonce': nonce, 'x-signature': signature.toString('base64') };
}
