// Transaction state: PENDING until completed (by the optional auto-complete delay or the control API), then
// SUCCESS or FAILED, final. Every final transition is announced once, which is what triggers a postback.
import { randomBytes } from 'node:crypto';
import { rfc3339 } from './clock.js';
import type { SimClock } from './clock.js';
import type { PaymentFields } from './payloads.js';

export type TransactionType = 'deposit' | 'withdrawal';
export type TransactionStatus = 'PENDING' | 'SUCCESS' | 'FAILED';
export type FinalStatus = Exclude<TransactionStatus, 'PENDING'>;

export interface Transaction {
  readonly id: string;
  readonly type: TransactionType;
  readonly username: string;
  readonly status: TransactionStatus;
  readonly fields: PaymentFields;
  /** RFC 3339, simulator clock. */
  readonly createdAt: string;
  readonly completedAt: string | undefined;
  /**
   * The secret the payment page puts in its forms: a completion must come from someone who loaded the page, not
   * from another site's cross-site form post. Operator-only: never in postbacks, the control API or the dashboard.
   */
  readonly pageToken: string;
}

export class TransactionStateError extends Error {
  override readonly name = 'TransactionStateError';
  constructor(
    readonly kind: 'not_found' | 'already_final',
    message: string,
  ) {
    super(message);
  }
}

export interface TransactionStoreOptions {
  readonly clock: SimClock;
  /** Complete every new transaction after this many ms; null leaves completion to the control API. */
  readonly autoCompleteMs: number | null;
  readonly autoCompleteStatus: FinalStatus;
  readonly onFinal: (tx: Transaction) => void;
  /** Test hook; default MAX_TRANSACTIONS. */
  readonly maxTransactions?: number;
}

/**
 * Only the newest transactions are kept (the oldest is forgotten first, whatever its state), so a long-running
 * simulator stays bounded; 10 000 is far more than any test or manual session looks back on.
 */
export const MAX_TRANSACTIONS = 10_000;

export interface TransactionStore {
  create(type: TransactionType, username: string, fields: PaymentFields): Transaction;
  get(id: string): Transaction | undefined;
  list(): Transaction[];
  complete(id: string, status: FinalStatus): Transaction;
  /** Cancels pending auto-completions (used on shutdown). */
  stop(): void;
}

export function createTransactionStore(options: TransactionStoreOptions): TransactionStore {
  const byId = new Map<string, Transaction>();
  const timers = new Set<NodeJS.Timeout>();

  const complete = (id: string, status: FinalStatus): Transaction => {
    const tx = byId.get(id);
    if (tx === undefined) throw new TransactionStateError('not_found', `no transaction ${id}`);
    if (tx.status !== 'PENDING') {
      throw new TransactionStateError('already_final', `transaction ${id} is already ${tx.status}`);
    }
    const done: Transaction = { ...tx, status, completedAt: rfc3339(options.clock.nowMs()) };
    byId.set(id, done);
    options.onFinal(done);
    return done;
  };

  const scheduleAutoComplete = (id: string): void => {
    if (options.autoCompleteMs === null) return;
    const timer = setTimeout(() => {
      timers.delete(timer);
      // The control API may have completed it first; that is not an error for the timer.
      if (byId.get(id)?.status === 'PENDING') complete(id, options.autoCompleteStatus);
    }, options.autoCompleteMs);
    timer.unref();
    timers.add(timer);
  };

  return {
    create(type, username, fields) {
      const tx: Transaction = {
        id: `txn_${randomBytes(12).toString('hex')}`,
        type,
        username,
        status: 'PENDING',
        fields,
        createdAt: rfc3339(options.clock.nowMs()),
        completedAt: undefined,
        pageToken: randomBytes(32).toString('base64url'),
      };
      byId.set(tx.id, tx);
      // Map keeps insertion order (completion re-sets an existing key, which keeps its place): first = oldest.
      const max = options.maxTransactions ?? MAX_TRANSACTIONS;
      for (const oldest of byId.keys()) {
        if (byId.size <= max) break;
        byId.delete(oldest);
      }
      scheduleAutoComplete(tx.id);
      return tx;
    },
    get: (id) => byId.get(id),
    list: () => [...byId.values()],
    complete,
    stop() {
      for (const timer of timers) clearTimeout(timer);
      timers.clear();
    },
  };
}

/** A transaction as the control API and RunningSimulator.transactions() show it (snake_case, like the gateway). */
export interface SimTransaction {
  readonly transaction_id: string;
  readonly type: TransactionType;
  readonly status: TransactionStatus;
  readonly amount: string;
  readonly currency: string;
  readonly invoice_no: string;
  readonly user_id: string;
  readonly gateway: string | undefined;
  /** The vendor account that created it. */
  readonly username: string;
  readonly created_at: string;
  readonly completed_at: string | undefined;
}

/**
 * The fields a vendor needs to reconcile a transaction, in the order they are signed into a postback. Postbacks
 * carry exactly these; the control API's view adds what only the simulator's operator needs. Adding a field here
 * puts it into every signed postback, so operator-only fields go in transactionJson instead.
 */
export function reconciliationFields(tx: Transaction) {
  return {
    transaction_id: tx.id,
    type: tx.type,
    status: tx.status,
    amount: tx.fields.amount,
    currency: tx.fields.currency,
    invoice_no: tx.fields.invoiceNo,
    user_id: tx.fields.userId,
    completed_at: tx.completedAt,
  };
}

export function transactionJson(tx: Transaction): SimTransaction {
  return { ...reconciliationFields(tx), gateway: tx.fields.gateway, username: tx.username, created_at: tx.createdAt };
}
