// Sends one deposit through the signing sidecar with a client typed from its contract: openapi-fetch over the types
// openapi-typescript generates from docs/openapi.json (sidecar.d.ts, written by `npm run docs:openapi`). The route,
// the Idempotency-Key header, the payload's fields and each error code with its `retryable` flag are checked by the
// compiler: a contract change that breaks this caller fails to compile (test/contract/typed-client.test.ts). Does
// with each answer what docs/clients.md says, as the other callers do. Reads SIDECAR_URL (default
// http://127.0.0.1:8080). Prints the answer's transaction_link and exits 0, or exits 1 naming the code of the answer
// that ended it.
import { randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import createClient from 'openapi-fetch';
import type { components, paths } from './sidecar.js';

const SIDECAR_URL = (process.env.SIDECAR_URL ?? 'http://127.0.0.1:8080').replace(/\/+$/, '');
const MAX_ATTEMPTS = Number(process.env.MAX_ATTEMPTS ?? 8);
// Longer than the sidecar's own request deadline (115 s by default): an attempt it is still working on is not cut.
const ATTEMPT_TIMEOUT_MS = Number(process.env.ATTEMPT_TIMEOUT_SECONDS ?? 130) * 1000;

// JSON answers only: a gateway answer of another kind is typed as none of them (openapi-fetch gives it as text).
const sidecar = createClient<paths, 'application/json'>({ baseUrl: SIDECAR_URL });

/** Retry-After when the sidecar gives one, else 0.5 s doubling up to 8 s. */
function backoffMs(attempt: number, retryAfter: string | null): number {
  if (retryAfter !== null && /^\d+$/.test(retryAfter)) return Number(retryAfter) * 1000;
  return Math.min(8000, 500 * 2 ** (attempt - 1));
}

/** Why a request got no answer: the network error's code, or the abort's name. */
function noAnswer(error: unknown): string {
  const failure = error as { name?: string; cause?: { code?: string } };
  return failure.cause?.code ?? failure.name ?? 'error';
}

async function main(): Promise<number> {
  // One key per payment, made (and in a real service stored with the order) before the first attempt: every retry
  // sends it, so the sidecar answers a retry from its record instead of sending a second payment.
  const key = randomUUID();
  const body: components['schemas']['DepositPayload'] = {
    amount: process.env.AMOUNT ?? '100.50',
    currency: process.env.CURRENCY ?? 'USD',
    gateway: 'card',
    user_id: process.env.USER_ID ?? 'u-42',
    invoice_no: process.env.INVOICE_NO ?? `INV-${key.slice(0, 8)}`,
  };
  let last = 'no answer';
  for (let attempt = 1; attempt <= MAX_ATTEMPTS; attempt++) {
    let answer;
    try {
      answer = await sidecar.POST('/api/v2/transaction/init', {
        params: { header: { 'Idempotency-Key': key } },
        body,
        signal: AbortSignal.timeout(ATTEMPT_TIMEOUT_MS),
      });
    } catch (error) {
      // A 2xx whose body is not JSON: the gateway's verdict, final.
      if (error instanceof SyntaxError) {
        console.error('deposit failed: a 2xx answer that is not JSON');
        return 1;
      }
      // No answer: with the same key this is safe to send again (a replay, or 409 while the first runs).
      last = `no answer (${noAnswer(error)})`;
      console.error(`attempt ${attempt}: ${last}`);
      await sleep(backoffMs(attempt, null));
      continue;
    }
    const { data, error, response } = answer;
    if (response.ok) {
      if (typeof data?.transaction_link === 'string') {
        console.log(data.transaction_link);
        return 0;
      }
      console.error(`deposit answered ${response.status} without transaction_link`);
      return 1;
    }
    // `error` is one of the sidecar's codes (each with its own `retryable` constant) or the gateway's own answer
    // (GatewayAnswer, no `retryable`); openapi-fetch gives a body that is not JSON as text.
    const refusal = typeof error === 'object' && error !== null && 'retryable' in error ? error : undefined;
    const gatewayCode = typeof error === 'object' && error !== null ? error.code : undefined;
    const code = refusal?.code ?? gatewayCode ?? `http.${response.status}`;
    // Only the sidecar's own answers marked retryable (nothing was sent; 409: the first is still running) are sent
    // again. outcome_unknown, any other 4xx and every gateway answer are final: the payment may exist.
    if (refusal?.retryable === true && refusal.code.startsWith('sidecar.')) {
      const wait = backoffMs(attempt, response.headers.get('retry-after'));
      console.error(`attempt ${attempt}: ${response.status} ${code}, again in ${wait / 1000}s`);
      last = code;
      await sleep(wait);
      continue;
    }
    console.error(`deposit failed: ${code} (HTTP ${response.status})`);
    return 1;
  }
  console.error(`deposit failed: ${last} after ${MAX_ATTEMPTS} attempts`);
  return 1;
}

process.exitCode = await main();
