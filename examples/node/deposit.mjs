// Sends one deposit through the signing sidecar and does with each answer what docs/clients.md says.
// Node 18+ (fetch), no dependencies. Reads SIDECAR_URL (default http://127.0.0.1:8080). Prints the answer's
// transaction_link and exits 0, or exits 1 naming the code of the answer that ended it.
/* global process, console, fetch, AbortSignal -- Node's own globals, for the repository's lint */
import { randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';

const SIDECAR_URL = (process.env.SIDECAR_URL ?? 'http://127.0.0.1:8080').replace(/\/+$/, '');
const MAX_ATTEMPTS = Number(process.env.MAX_ATTEMPTS ?? 8);
// Longer than the sidecar's own request deadline (115 s by default): an attempt it is still working on is not cut.
const ATTEMPT_TIMEOUT_MS = Number(process.env.ATTEMPT_TIMEOUT_SECONDS ?? 130) * 1000;

/** Retry-After when the sidecar gives one, else 0.5 s doubling up to 8 s. */
function backoffMs(attempt, retryAfter) {
  if (retryAfter !== null && /^\d+$/.test(retryAfter)) return Number(retryAfter) * 1000;
  return Math.min(8000, 500 * 2 ** (attempt - 1));
}

async function main() {
  // One key per payment, made (and in a real service stored with the order) before the first attempt: every retry
  // sends it, so the sidecar answers a retry from its record instead of sending a second payment.
  const key = randomUUID();
  const body = JSON.stringify({
    amount: process.env.AMOUNT ?? '100.50',
    currency: process.env.CURRENCY ?? 'USD',
    gateway: 'card',
    user_id: process.env.USER_ID ?? 'u-42',
    invoice_no: process.env.INVOICE_NO ?? `INV-${key.slice(0, 8)}`,
  });
  let last = 'no answer';
  for (let attempt = 1; attempt <= MAX_ATTEMPTS; attempt++) {
    let response;
    let text;
    try {
      response = await fetch(`${SIDECAR_URL}/api/v2/transaction/init`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'idempotency-key': key },
        body,
        signal: AbortSignal.timeout(ATTEMPT_TIMEOUT_MS),
      });
      text = await response.text();
    } catch (error) {
      // No answer: with the same key this is safe to send again (a replay, or 409 while the first runs).
      last = `no answer (${error.cause?.code ?? error.name})`;
      console.error(`attempt ${attempt}: ${last}`);
      await sleep(backoffMs(attempt, null));
      continue;
    }
    let answer = {};
    try {
      const parsed = JSON.parse(text);
      if (parsed !== null && typeof parsed === 'object' && !Array.isArray(parsed)) answer = parsed;
    } catch {
      // not JSON: a gateway answer of its own kind
    }
    if (response.ok) {
      if (typeof answer.transaction_link === 'string') {
        console.log(answer.transaction_link);
        return 0;
      }
      console.error(`deposit answered ${response.status} without transaction_link`);
      return 1;
    }
    const code = typeof answer.code === 'string' ? answer.code : `http.${response.status}`;
    // Only the sidecar's own answers marked retryable (nothing was sent; 409: the first is still running) are sent
    // again. outcome_unknown, any other 4xx and every gateway answer are final: the payment may exist.
    if (code.startsWith('sidecar.') && answer.retryable === true) {
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
