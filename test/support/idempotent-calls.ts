// Signed requests with an Idempotency-Key, as a caller sends them, and what came back byte for byte.
import assert from 'node:assert/strict';
import { createHash, randomUUID } from 'node:crypto';
import type { SidecarDeps } from '../../src/app.js';
import { makeKeys } from './keys.js';
import { depositJson } from './payloads.js';
import { RecordingGateway } from './recording-gateway.js';
import { sidecarEnv, startTestSidecar, waitUntilReady, type TestSidecar } from './sidecar.js';
import { waitFor } from './wait-for.js';

export const DEPOSIT_PATH = '/api/v2/transaction/init';

export interface Reply {
  readonly status: number;
  readonly headers: Headers;
  readonly body: Buffer;
  readonly code: string | undefined;
  readonly retryable: boolean | undefined;
  readonly replayed: boolean;
}

/** POSTs `body` to the sidecar's deposit route (or `path`) with `key` as Idempotency-Key (none when undefined). */
export async function send(
  proxyUrl: string,
  key: string | undefined,
  body: string,
  path = DEPOSIT_PATH,
  headers: Record<string, string> = {},
): Promise<Reply> {
  const res = await fetch(`${proxyUrl}${path}`, {
    method: 'POST',
    headers: {
      'content-type': 'application/json',
      ...(key === undefined ? {} : { 'idempotency-key': key }),
      ...headers,
    },
    body,
  });
  const bytes = Buffer.from(await res.arrayBuffer());
  let parsed: { code?: unknown; retryable?: unknown } = {};
  try {
    parsed = JSON.parse(bytes.toString('utf8')) as typeof parsed;
  } catch {
    // not JSON: code and retryable stay undefined
  }
  return {
    status: res.status,
    headers: res.headers,
    body: bytes,
    code: typeof parsed.code === 'string' ? parsed.code : undefined,
    retryable: typeof parsed.retryable === 'boolean' ? parsed.retryable : undefined,
    replayed: res.headers.get('idempotent-replayed') === 'true',
  };
}

/**
 * The answers a caller can rely on: the first answer again, an outcome to check, or a retryable refusal with nothing
 * sent: 503, or 409 in_progress for a key whose first request could not record its answer while Redis failed over
 * (the claim stands until its deadline, then a retry gets outcome_unknown: never a second payment).
 */
export function acceptable(reply: Reply): boolean {
  if (reply.status === 200) return true;
  if (reply.code === 'sidecar.upstream.outcome_unknown') return true;
  const refused = reply.status === 503 || reply.code === 'sidecar.idempotency.in_progress';
  return refused && reply.retryable === true;
}

/** A key as a careful caller makes one: random, unique per payment. */
export const newKey = (): string => `pay-${randomUUID()}`;

let invoice = 0;
/** A deposit of its own invoice number. */
export const freshDeposit = (): string => depositJson({ invoice_no: `inv-idem-${process.pid}-${++invoice}` });

/** The value of one series in a Prometheus exposition (undefined when absent). */
export function seriesValue(metricsText: string, series: string): number | undefined {
  const line = metricsText.split('\n').find((l) => l.startsWith(`${series} `));
  return line === undefined ? undefined : Number(line.slice(series.length + 1));
}

/** A ready sidecar with deps of the test's own (a store wrapper, a clock) in front of a recording gateway. */
export async function withSidecar(
  extraEnv: NodeJS.ProcessEnv,
  deps: SidecarDeps,
  body: (gateway: RecordingGateway, running: TestSidecar) => Promise<void>,
): Promise<void> {
  const keys = await makeKeys();
  const gateway = await new RecordingGateway().start();
  const running = await startTestSidecar(await sidecarEnv(keys, gateway.url, extraEnv), deps);
  try {
    await waitUntilReady(running.sidecar);
    await body(gateway, running);
  } finally {
    await running.stop();
    await gateway.stop();
  }
}

/** `replay` is `original` again, from the record: status, Content-Type, body bytes, Idempotent-Replayed. */
export function assertSameAnswer(replay: Reply, original: Reply): void {
  assert.equal(replay.status, original.status);
  assert.ok(replay.body.equals(original.body), 'body byte for byte');
  assert.equal(replay.headers.get('content-type'), original.headers.get('content-type'));
  assert.equal(replay.replayed, true);
}

export const sha256 = (text: string): string => createHash('sha256').update(text).digest('hex');

/** A keyed payment sent while `gateway` holds its answer; resolves once the gateway has it, `first` still pending. */
export async function sendHeld(
  gateway: RecordingGateway,
  proxyUrl: string,
): Promise<{ key: string; payment: string; first: Promise<Reply> }> {
  gateway.holdUntil = Number.POSITIVE_INFINITY;
  const key = newKey();
  const payment = freshDeposit();
  const first = send(proxyUrl, key, payment);
  await waitFor('the condition', () => gateway.requests.length === 1);
  return { key, payment, first };
}

/** The store unreachable: a keyed payment is refused 503 unavailable (retryable), never sent; one without a key goes. */
export async function assertKeyedRefusedUnkeyedSent(proxyUrl: string, gateway: RecordingGateway): Promise<void> {
  const refused = await send(proxyUrl, newKey(), freshDeposit());
  assert.equal(refused.status, 503);
  assert.equal(refused.code, 'sidecar.idempotency.unavailable');
  assert.equal(refused.retryable, true);
  assert.equal(gateway.requests.length, 0);
  assert.equal((await send(proxyUrl, undefined, freshDeposit())).status, 201);
}

/** Calls again every 200 ms until a reply is `wanted` or `ms` pass; the last reply either way, for the assertion. */
export async function replyWhen(
  call: () => Promise<Reply>,
  wanted: (reply: Reply) => boolean,
  ms: number,
): Promise<Reply> {
  const deadline = Date.now() + ms;
  for (;;) {
    const reply = await call();
    if (wanted(reply) || Date.now() > deadline) return reply;
    await new Promise((resolve) => setTimeout(resolve, 200));
  }
}

/** After a failover the sidecar finds the new primary by itself: within 30 s a keyed payment goes through. */
export function untilOk(call: () => Promise<Reply>): Promise<Reply> {
  return replyWhen(call, (reply) => reply.status === 200, 30_000);
}
