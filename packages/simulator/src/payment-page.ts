// The stand-in for the hosted payment page that a deposit's transaction_link points at: the customer sees the
// amount and presses "Pay" or "Decline", which completes the transaction and starts its postback, as the control
// API's complete does. Plain HTML forms, no script. A completion needs the page's per-transaction token, so
// another site cannot complete a payment with a cross-site form post.
import { createHash, timingSafeEqual } from 'node:crypto';
import type { IncomingMessage } from 'node:http';
import { SimError, badRequest } from './errors.js';
import { html, page } from './html.js';
import type { Html } from './html.js';
import { readBody } from './http-io.js';
import { TransactionStateError } from './transactions.js';
import type { SimContext } from './context.js';
import type { PostbackAttempt } from './postbacks.js';
import type { Transaction } from './transactions.js';

/** Two short fields; anything bigger is not this page's form. */
const MAX_FORM_BYTES = 4096;
/**
 * How long a completion waits for the first postback attempt before showing the page, so the customer (the
 * developer) sees what the webhook answered. Longer than that, the page says the delivery is under way.
 */
export const POSTBACK_WAIT_MS = 10_000;

export const PAY_PATH = /^\/pay\/(txn_[0-9a-f]+)$/;

export function paymentPagePath(ctx: SimContext, id: string): string {
  return `${ctx.base().pathPrefix}/pay/${id}`;
}

export function paymentLink(ctx: SimContext, tx: Transaction): string {
  return ctx.base().origin + paymentPagePath(ctx, tx.id);
}

export function findTransaction(ctx: SimContext, id: string): Transaction {
  const tx = ctx.transactions.get(id);
  if (tx === undefined) throw new SimError(404, 'sim.transaction.not_found', `no transaction ${id}`);
  return tx;
}

/**
 * Completes the transaction from the page's form (the POST of "Pay" or "Decline") and waits briefly for the
 * first postback attempt. The caller then redirects to the page (post/redirect/get), so a reload does not post
 * the form again.
 */
export async function completeFromPage(ctx: SimContext, req: IncomingMessage, id: string): Promise<Transaction> {
  const tx = findTransaction(ctx, id);
  const type = req.headers['content-type']?.split(';')[0]?.trim().toLowerCase();
  if (type !== 'application/x-www-form-urlencoded') {
    throw new SimError(415, 'request.content_type.invalid', 'the payment form posts application/x-www-form-urlencoded');
  }
  const form = new URLSearchParams((await readBody(req, Math.min(MAX_FORM_BYTES, ctx.maxBodyBytes))).toString());
  if (!tokenMatches(tx.pageToken, form.get('token'))) {
    throw new SimError(
      403,
      'sim.pay.token.invalid',
      "the form's token is missing or is not this payment page's: load the page and press the button there",
    );
  }
  // Defence in depth behind the token: browsers say where a request came from, and only the page itself posts.
  const site = req.headers['sec-fetch-site'];
  if (site !== undefined && site !== 'same-origin' && site !== 'none') {
    throw new SimError(403, 'sim.pay.cross_site', `the payment form accepts posts from its own page only, not ${site}`);
  }
  const status = form.get('status');
  if (status !== 'SUCCESS' && status !== 'FAILED')
    throw badRequest('sim.status.invalid', 'status must be SUCCESS or FAILED');
  let done: Transaction;
  try {
    done = ctx.transactions.complete(id, status);
  } catch (err) {
    if (err instanceof TransactionStateError && err.kind === 'already_final') {
      throw new SimError(409, 'sim.transaction.already_final', err.message);
    }
    throw err;
  }
  ctx.logger.info({ event: 'sim.pay.completed', transactionId: id, status }, `completed ${id} from the payment page`);
  if (ctx.accounts.get(done.username)?.webhookUrl !== undefined) {
    await ctx.postbacks.firstAttempt(id, POSTBACK_WAIT_MS);
  }
  return done;
}

/** Compares digests, so the comparison takes the same time whatever the length or content of the guess. */
function tokenMatches(expected: string, candidate: string | null): boolean {
  if (candidate === null || candidate === '') return false;
  const digest = (s: string): Buffer => createHash('sha256').update(s, 'utf8').digest();
  return timingSafeEqual(digest(expected), digest(candidate));
}

export function paymentPageHtml(ctx: SimContext, tx: Transaction): string {
  const action = paymentPagePath(ctx, tx.id);
  const hasWebhook = ctx.accounts.get(tx.username)?.webhookUrl !== undefined;
  const attempts = tx.status === 'PENDING' ? [] : ctx.postbacks.attempts().filter((a) => a.transactionId === tx.id);
  // Completed, a webhook to call, no attempt recorded yet: reload until the first one is.
  const waiting = tx.status !== 'PENDING' && hasWebhook && attempts.length === 0;
  const body = html`<h1>Simulated payment</h1>
    <p class="muted">The gateway simulator's stand-in for the hosted payment page.</p>
    <table>
      <tr>
        <th>Transaction</th>
        <td><code>${tx.id}</code></td>
      </tr>
      <tr>
        <th>Amount</th>
        <td id="amount">${tx.fields.amount}</td>
      </tr>
      <tr>
        <th>Currency</th>
        <td id="currency">${tx.fields.currency}</td>
      </tr>
      <tr>
        <th>Invoice</th>
        <td id="invoice">${tx.fields.invoiceNo}</td>
      </tr>
      <tr>
        <th>Status</th>
        <td id="status" class="${tx.status}">${tx.status}</td>
      </tr>
      ${
        tx.completedAt === undefined
          ? ''
          : html`<tr>
              <th>Completed</th>
              <td>${tx.completedAt}</td>
            </tr>`
      }
    </table>
    ${tx.status === 'PENDING' ? buttons(action, tx.pageToken) : postbackSection(hasWebhook, attempts)}`;
  return page({ title: `Payment ${tx.id}`, refreshSeconds: waiting ? 2 : undefined }, body);
}

function buttons(action: string, token: string): Html {
  const form = (status: string, label: string, cls: string): Html =>
    html`<form method="post" action="${action}">
      <input type="hidden" name="token" value="${token}" />
      <input type="hidden" name="status" value="${status}" />
      <button type="submit" class="${cls}">${label}</button>
    </form>`;
  return html`${form('SUCCESS', 'Pay', 'pay')}${form('FAILED', 'Decline', 'decline')}
    <p class="muted">"Pay" completes the transaction as SUCCESS, "Decline" as FAILED; either sends the postback.</p>`;
}

function postbackSection(hasWebhook: boolean, attempts: readonly PostbackAttempt[]): Html {
  if (!hasWebhook) {
    return html`<h2>Postback</h2>
      <p id="postback">This account has no webhook URL: no postback is sent.</p>`;
  }
  if (attempts.length === 0) {
    return html`<h2>Postback</h2>
      <p id="postback">Delivery under way; this page reloads until it is attempted.</p>`;
  }
  const rows = attempts.map(
    (a) =>
      html`<tr>
        <td>${a.attempt}</td>
        <td>${a.at}</td>
        <td><code>${a.url}</code></td>
        <td>${attemptOutcome(a)}</td>
      </tr>`,
  );
  return html`<h2>Postback</h2>
    <table id="postback">
      <tr>
        <th>Attempt</th>
        <th>At</th>
        <th>Webhook</th>
        <th>Answer</th>
      </tr>
      ${rows}
    </table>`;
}

export function attemptOutcome(a: PostbackAttempt): Html {
  if (a.status === undefined) return html`<span class="refused">error: ${a.error ?? 'unknown'}</span>`;
  return html`<span class="${a.delivered ? 'accepted' : 'refused'}"
    >HTTP ${a.status}${a.delivered ? ', delivered' : ', not delivered'}</span
  >`;
}

/** The answer to a refused page request: a page a person can read, with the same code the log line carries. */
export function errorPageHtml(err: SimError): string {
  return page(
    { title: 'Refused' },
    html`<h1>Refused: <code>${err.code}</code></h1>
      <p id="reason">${err.message}</p>`,
  );
}
