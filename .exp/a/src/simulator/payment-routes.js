import { validateDeposit, validateWithdrawal } from './payloads.js';
import { verifySignedRequest } from './signed-request.js';
export async function handlePaymentInit(ctx, req, info, kind) {
    const { account, payload } = await verifySignedRequest(ctx, req, info);
    const fields = kind === 'deposit' ? validateDeposit(payload) : validateWithdrawal(payload);
    const tx = ctx.transactions.create(kind, account.username, fields);
    ctx.logger.info({ event: 'request.accepted', ...info, transactionId: tx.id, type: kind, invoiceNo: fields.invoiceNo }, `accepted ${kind} ${tx.id}`);
    const body = {
        transaction_id: tx.id,
        status: tx.status,
        amount: fields.amount,
        currency: fields.currency,
        invoice_no: fields.invoiceNo,
    };
    if (kind === 'deposit')
        body.transaction_link = paymentLink(ctx, tx);
    return { status: 200, body };
}
function paymentLink(ctx, tx) {
    const base = ctx.base();
    return `${base.origin}${base.pathPrefix}/pay/${tx.id}`;
}
/** A stand-in for the hosted payment page, so a followed transaction_link lands somewhere real. */
export function paymentPageHtml(tx) {
    const esc = (s) => s.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
    return [
        '<!doctype html><meta charset="utf-8"><title>Simulated payment</title>',
        `<h1>Simulated payment page</h1><p>Transaction ${esc(tx.id)}: ${esc(tx.fields.amount)} `,
        `${esc(tx.fields.currency)}, invoice ${esc(tx.fields.invoiceNo)}, status <b>${esc(tx.status)}</b>.</p>`,
        '<p>Complete it with <code>POST /_sim/transactions/&lt;id&gt;/complete {"status":"SUCCESS"}</code>.</p>',
    ].join('\n');
}
