// The dashboard at /_sim/: what the simulator saw, for a developer debugging their integration. It shows
// accounts, the newest requests with their verdicts, transactions with their postbacks, and the armed faults.
// It is served to loopback clients only (the control API's rule) and shows nothing secret: no passwords,
// tokens, signatures or payload fields; keys by fingerprint; webhook URLs without query or credentials.
import { createHash } from 'node:crypto';
import type { KeyObject } from 'node:crypto';
import { rfc3339 } from './clock.js';
import { html, page } from './html.js';
import type { Html } from './html.js';
import { attemptOutcome, paymentPagePath } from './payment-page.js';
import { displayUrl } from './postbacks.js';
import type { Account } from './accounts.js';
import type { SimContext } from './context.js';
import type { PostbackAttempt } from './postbacks.js';
import type { LoggedRequest } from './request-log.js';

/** A page, not an archive: the newest transactions; the control API lists them all. */
export const DASHBOARD_TRANSACTIONS = 50;

/** SHA-256 of the key's SPKI DER, hex: `openssl pkey -pubin -outform DER | sha256sum` prints the same. */
export function keyFingerprint(key: KeyObject): string {
  return createHash('sha256')
    .update(key.export({ type: 'spki', format: 'der' }))
    .digest('hex');
}

export function dashboardHtml(ctx: SimContext, refreshSeconds: number | undefined): string {
  const base = ctx.base();
  const offset = ctx.clock.offsetSeconds();
  const reload =
    refreshSeconds === undefined
      ? html`<a href="?">Reload</a> · <a href="?refresh=5">reload every 5 s</a>`
      : html`Reloads every ${refreshSeconds} s · <a href="?">stop reloading</a>`;
  const body = html`<h1>Gateway simulator</h1>
    <p>
      Base URL (clients sign for this): <code>${base.origin + base.pathPrefix}</code><br />
      Simulator time: ${rfc3339(ctx.clock.nowMs())}${offset === 0 ? '' : ` (clock offset ${offset} s)`}<br />
      ${reload}
    </p>
    ${accountsSection(ctx)} ${requestsSection(ctx.requests.recent())} ${transactionsSection(ctx)} ${faultsSection(ctx)}`;
  return page({ title: 'Gateway simulator', refreshSeconds }, body);
}

function accountsSection(ctx: SimContext): Html {
  const rows = [...ctx.accounts.values()].map((a) => accountRow(a));
  return html`<h2>Accounts</h2>
    <table id="accounts">
      <tr>
        <th>Username</th>
        <th>Public key fingerprints (SHA-256 of SPKI DER)</th>
        <th>Allowlisted sources</th>
        <th>Webhook</th>
      </tr>
      ${rows}
    </table>`;
}

function accountRow(a: Account): Html {
  const keys = a.publicKeys().map((k) => html`<code>${keyFingerprint(k)}</code><br />`);
  const webhook =
    a.webhookUrl === undefined
      ? html`<span class="muted">none</span>`
      : html`<code>${displayUrl(a.webhookUrl)}</code> (${a.signedPostbacks ? 'signed' : 'unsigned'} postbacks)`;
  return html`<tr>
    <td>${a.username}</td>
    <td>${keys}</td>
    <td>${a.allowIps.join(', ')}</td>
    <td>${webhook}</td>
  </tr>`;
}

function requestsSection(requests: readonly LoggedRequest[]): Html {
  if (requests.length === 0)
    return html`<h2>Recent requests</h2>
      <p id="requests" class="muted">None yet.</p>`;
  const rows = requests.map(
    (r) =>
      html`<tr>
        <td class="nowrap">${r.at}</td>
        <td>${r.method} <code>${r.path}</code></td>
        <td>${r.ip ?? 'unknown'}</td>
        <td>${r.account ?? ''}</td>
        <td>${r.status ?? 'dropped'}</td>
        <td class="nowrap ${r.verdict === 'accepted' ? 'accepted' : 'refused'}"><code>${r.verdict}</code></td>
        <td>${r.reason}</td>
      </tr>`,
  );
  return html`<h2>Recent requests (newest first, last ${requests.length})</h2>
    <table id="requests">
      <tr>
        <th>At (simulator time)</th>
        <th>Request</th>
        <th>Source</th>
        <th>Account</th>
        <th>Status</th>
        <th>Verdict</th>
        <th>Reason</th>
      </tr>
      ${rows}
    </table>`;
}

function transactionsSection(ctx: SimContext): Html {
  const all = ctx.transactions.list();
  if (all.length === 0)
    return html`<h2>Transactions</h2>
      <p id="transactions" class="muted">None yet.</p>`;
  const shown = all.slice(-DASHBOARD_TRANSACTIONS).reverse();
  const byTransaction = new Map<string, PostbackAttempt[]>();
  for (const attempt of ctx.postbacks.attempts()) {
    const list = byTransaction.get(attempt.transactionId) ?? [];
    list.push(attempt);
    byTransaction.set(attempt.transactionId, list);
  }
  const rows = shown.map((tx) => {
    const postbacks = (byTransaction.get(tx.id) ?? []).map(
      (a) => html`#${a.attempt} ${a.at} <code>${a.url}</code>: ${attemptOutcome(a)}<br />`,
    );
    return html`<tr>
      <td>
        <a href="${paymentPagePath(ctx, tx.id)}"><code>${tx.id}</code></a>
      </td>
      <td>${tx.type}</td>
      <td>${tx.username}</td>
      <td class="${tx.status}">${tx.status}</td>
      <td>${tx.createdAt}</td>
      <td>${tx.completedAt ?? ''}</td>
      <td>${postbacks.length === 0 ? html`<span class="muted">none</span>` : postbacks}</td>
    </tr>`;
  });
  const count = all.length > shown.length ? ` (newest ${shown.length} of ${all.length})` : '';
  return html`<h2>Transactions${count}</h2>
    <table id="transactions">
      <tr>
        <th>Transaction (payment page)</th>
        <th>Type</th>
        <th>Account</th>
        <th>Status</th>
        <th>Created</th>
        <th>Completed</th>
        <th>Postbacks and the webhook's answers</th>
      </tr>
      ${rows}
    </table>`;
}

function faultsSection(ctx: SimContext): Html {
  const faults = ctx.faults.list();
  if (faults.length === 0)
    return html`<h2>Armed faults</h2>
      <p id="faults" class="muted">None.</p>`;
  const rows = faults.map((f) => {
    const detail = f.kind === 'delay' ? `${f.delayMs} ms` : f.kind === '5xx' ? `HTTP ${f.status}` : '';
    return html`<tr>
      <td>${f.kind}</td>
      <td>${detail}</td>
      <td>${f.target}</td>
      <td>${f.remaining}</td>
    </tr>`;
  });
  return html`<h2>Armed faults</h2>
    <table id="faults">
      <tr>
        <th>Kind</th>
        <th>Detail</th>
        <th>Applies to</th>
        <th>Requests left</th>
      </tr>
      ${rows}
    </table>`;
}
