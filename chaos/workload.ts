// The callers: each sends deposits and withdrawals one after another, a fresh Idempotency-Key and a unique
// invoice_no per payment, and follows the README's retry contract exactly: the same key again on a `retryable`
// answer, a 409 or no answer at all, to any replica; never a new key for the same payment. Then it completes the
// transaction on the gateway (Pay or Decline), so that a postback goes out.
import { randomUUID } from 'node:crypto';
import type { Outcome, PaymentKind } from './history.js';
import type { Recorder } from './recorder.js';
import { RESPONSE_TIMEOUT_MS, sleep, type World } from './world.js';

const PATHS: Record<PaymentKind, string> = {
  deposit: '/api/v2/transaction/init',
  withdrawal: '/api/v2/transfer-out/init',
};
/** A payment's callers give up after this long (its last answer stays `info` or `fail`). */
const PAYMENT_PATIENCE_MS = 120_000;
/** The caller's own deadline for one attempt: past the sidecar's, which answers 504 first. */
const ATTEMPT_TIMEOUT_MS = RESPONSE_TIMEOUT_MS + 10_000;

export interface Caller {
  readonly process: number;
  readonly random: () => number;
}

interface Attempt {
  readonly outcome: Outcome;
  readonly status: number;
  readonly code: string | undefined;
  readonly transactionId: string | undefined;
  /** Send the same key again (after `waitMs`). */
  readonly again: boolean;
  readonly waitMs: number;
}

/** One payment to its end; true when it was answered 200 (then completed on the gateway). */
export async function pay(
  world: World,
  recorder: Recorder,
  caller: Caller,
  invoiceNo: string,
  finalRound = false,
): Promise<boolean> {
  // The final round pays deposits, which no enforced money limit of the world covers (world.ts): it shows payments
  // go through once the faults healed, not what a limit refuses.
  const op: PaymentKind = finalRound || caller.random() < 0.7 ? 'deposit' : 'withdrawal';
  const key = randomUUID();
  const body = JSON.stringify({
    amount: `${1 + Math.floor(caller.random() * 500)}.${String(Math.floor(caller.random() * 100)).padStart(2, '0')}`,
    currency: 'EUR',
    gateway: 'card',
    user_id: `user-${caller.process}`,
    invoice_no: invoiceNo,
  });
  const started = performance.now();
  const flags = finalRound ? { final_round: true } : {};
  for (let tries = 0; ; tries++) {
    const inService = world.replicas.filter((replica) => replica.inService);
    const replica = inService[Math.floor(caller.random() * inService.length)];
    if (replica === undefined) {
      await sleep(200);
      continue;
    }
    const common = { process: caller.process, invoice_no: invoiceNo, key, replica: replica.index, ...flags };
    recorder.record({ type: 'invoke', op, ...common });
    const sentAt = performance.now();
    const attempt = await send(`http://${replica.host}:${replica.ports.proxy}${PATHS[op]}`, key, body, invoiceNo);
    recorder.record({
      type: attempt.outcome,
      ...common,
      status: attempt.status,
      ...(attempt.code === undefined ? {} : { code: attempt.code }),
      ...(attempt.transactionId === undefined ? {} : { transaction_id: attempt.transactionId }),
      latency_ms: Math.round(performance.now() - sentAt),
    });
    if (attempt.outcome === 'ok' && attempt.transactionId !== undefined) {
      await complete(
        world,
        recorder,
        attempt.transactionId,
        finalRound || caller.random() < 0.7 ? 'SUCCESS' : 'FAILED',
      );
      return true;
    }
    if (!attempt.again || performance.now() - started > PAYMENT_PATIENCE_MS) return false;
    await sleep(Math.min(attempt.waitMs * 2 ** Math.min(tries, 3), 2_000));
  }
}

async function send(url: string, key: string, body: string, invoiceNo: string): Promise<Attempt> {
  let res: Response;
  let text: string;
  try {
    res = await fetch(url, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'idempotency-key': key },
      body,
      signal: AbortSignal.timeout(ATTEMPT_TIMEOUT_MS),
    });
    text = await res.text();
  } catch {
    // No answer (the replica died, the connection was cut): unknown, and safe to send again with the same key.
    return { outcome: 'info', status: 0, code: undefined, transactionId: undefined, again: true, waitMs: 250 };
  }
  const json = parseJson(text);
  const code = typeof json.code === 'string' ? json.code : undefined;
  const base = { status: res.status, code, transactionId: undefined };
  if (res.status === 200) {
    const id = typeof json.transaction_id === 'string' ? json.transaction_id : undefined;
    // An answer naming another payment would be a bug of its own: it counts as unknown, and the checker sees it.
    if (json.invoice_no !== invoiceNo) return { ...base, outcome: 'info', again: false, waitMs: 0 };
    return { ...base, transactionId: id, outcome: 'ok', again: false, waitMs: 0 };
  }
  if (res.status === 409) {
    const retryAfter = Number(res.headers.get('retry-after') ?? 1);
    return { ...base, outcome: 'info', again: true, waitMs: Math.min(1_000, Math.max(100, retryAfter * 1_000)) };
  }
  if (json.retryable === true) return { ...base, outcome: 'fail', again: true, waitMs: 200 };
  // Any other answer is final for this key (a retry gets it replayed): a refusal is certain, a 5xx is not.
  return { ...base, outcome: res.status >= 500 ? 'info' : 'fail', again: false, waitMs: 0 };
}

/** Pay (SUCCESS) or Decline (FAILED) on the gateway, as the customer would on the payment page. */
async function complete(
  world: World,
  recorder: Recorder,
  transactionId: string,
  status: 'SUCCESS' | 'FAILED',
): Promise<void> {
  const answer = await world.control
    .call('POST', `/_sim/transactions/${transactionId}/complete`, { status })
    .catch(() => undefined);
  if (answer?.status === 200) recorder.record({ type: 'complete', transaction_id: transactionId, status });
}

/** A caller's loop: payments until `running()` says stop, a short pause between them. */
export async function callerLoop(
  world: World,
  recorder: Recorder,
  caller: Caller,
  running: () => boolean,
  invoicePrefix: string,
): Promise<void> {
  for (let n = 1; running(); n++) {
    await pay(world, recorder, caller, `${invoicePrefix}-p${caller.process}-${n}`);
    await sleep(150 + caller.random() * 350);
  }
}

function parseJson(text: string): Record<string, unknown> {
  try {
    const value: unknown = JSON.parse(text);
    return typeof value === 'object' && value !== null ? (value as Record<string, unknown>) : {};
  } catch {
    return {};
  }
}
