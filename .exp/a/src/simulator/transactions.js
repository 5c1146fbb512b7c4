// Transaction state: PENDING until completed (by the optional auto-complete delay or the control API), then
// SUCCESS or FAILED, final. Every final transition is announced once, which is what triggers a postback.
import { randomBytes } from 'node:crypto';
import { rfc3339 } from './clock.js';
export class TransactionStateError extends Error {
    kind;
    name = 'TransactionStateError';
    constructor(kind, message) {
        super(message);
        this.kind = kind;
    }
}
export function createTransactionStore(options) {
    const byId = new Map();
    const timers = new Set();
    const complete = (id, status) => {
        const tx = byId.get(id);
        if (tx === undefined)
            throw new TransactionStateError('not_found', `no transaction ${id}`);
        if (tx.status !== 'PENDING') {
            throw new TransactionStateError('already_final', `transaction ${id} is already ${tx.status}`);
        }
        const done = { ...tx, status, completedAt: rfc3339(options.clock.nowMs()) };
        byId.set(id, done);
        options.onFinal(done);
        return done;
    };
    const scheduleAutoComplete = (id) => {
        if (options.autoCompleteMs === null)
            return;
        const timer = setTimeout(() => {
            timers.delete(timer);
            // The control API may have completed it first; that is not an error for the timer.
            if (byId.get(id)?.status === 'PENDING')
                complete(id, options.autoCompleteStatus);
        }, options.autoCompleteMs);
        timer.unref();
        timers.add(timer);
    };
    return {
        create(type, username, fields) {
            const tx = {
                id: `txn_${randomBytes(12).toString('hex')}`,
                type,
                username,
                status: 'PENDING',
                fields,
                createdAt: rfc3339(options.clock.nowMs()),
                completedAt: undefined,
            };
            byId.set(tx.id, tx);
            scheduleAutoComplete(tx.id);
            return tx;
        },
        get: (id) => byId.get(id),
        list: () => [...byId.values()],
        complete,
        stop() {
            for (const timer of timers)
                clearTimeout(timer);
            timers.clear();
        },
    };
}
export function transactionJson(tx) {
    return {
        transaction_id: tx.id,
        type: tx.type,
        status: tx.status,
        amount: tx.fields.amount,
        currency: tx.fields.currency,
        invoice_no: tx.fields.invoiceNo,
        user_id: tx.fields.userId,
        gateway: tx.fields.gateway,
        username: tx.username,
        created_at: tx.createdAt,
        completed_at: tx.completedAt,
    };
}
