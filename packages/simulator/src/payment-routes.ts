// The two signed endpoints. Success status is not in the spec; we answer 200 (documented assumption) with the
// transaction id, status PENDING and, for deposits, the transaction_link the customer is sent to.
import type { IncomingMessage } from 'node:http';
import { paymentLink } from './payment-page.js';
import { validateDeposit, validateWithdrawal } from './payloads.js';
import { verifySignedRequest } from './signed-request.js';
import type { RequestInfo, SimContext } from './context.js';

export interface PaymentInitResult {
  readonly status: number;
  readonly body: Record<string, string>;
}

export async function handlePaymentInit(
  ctx: SimContext,
  req: IncomingMessage,
  info: RequestInfo,
  kind: 'deposit' | 'withdrawal',
): Promise<PaymentInitResult> {
  const { account, payload } = await verifySignedRequest(ctx, req, info);
  const fields = kind === 'deposit' ? validateDeposit(payload) : validateWithdrawal(payload);
  const tx = ctx.transactions.create(kind, account.username, fields);
  ctx.logger.info(
    // No payload fields (invoice, amount): logs never carry payload data; the transaction id is the handle.
    { event: 'request.accepted', ...info, transactionId: tx.id, type: kind },
    `accepted ${kind} ${tx.id}`,
  );
  const body: Record<string, string> = {
    transaction_id: tx.id,
    status: tx.status,
    amount: fields.amount,
    currency: fields.currency,
    invoice_no: fields.invoiceNo,
  };
  if (kind === 'deposit') body.transaction_link = paymentLink(ctx, tx);
  return { status: 200, body };
}
