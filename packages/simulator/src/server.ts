// Routing and the one place where errors become responses. A handler either returns a result or throws a
// SimError; anything else is a simulator bug, answered 500 and logged, never a crash.
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import { CONTROL_PREFIX, handleControl } from './control-api.js';
import { SimError, tokenRejected } from './errors.js';
import { readBody, sendError, sendJson } from './http-io.js';
import { rfc3339 } from './clock.js';
import { sendHtml } from './html.js';
import { normalizeAddress } from './ip-allow.js';
import {
  PAY_PATH,
  completeFromPage,
  errorPageHtml,
  findTransaction,
  paymentPageHtml,
  paymentPagePath,
} from './payment-page.js';
import { handlePaymentInit } from './payment-routes.js';
import { checkSourceIp } from './signed-request.js';
import { sleepUnlessAborted } from './sleep.js';
import { handleTokenRequest } from './token-endpoint.js';
import type { RequestInfo, SimContext } from './context.js';
import { AFTER_COMMIT_KINDS, type ArmedFault } from './faults.js';

type RouteKind = 'token' | 'deposit' | 'withdrawal';

const API_ROUTES: Readonly<Record<string, RouteKind>> = {
  '/api/v2/auth/token': 'token',
  '/api/v2/transaction/init': 'deposit',
  '/api/v2/transfer-out/init': 'withdrawal',
};

/**
 * How one exchange is answered and remembered: the payment page's refusals are pages a person reads, and page
 * views and the /_sim/ traffic (the dashboard reloading) stay out of the dashboard's request list.
 */
interface Exchange {
  html: boolean;
  record: boolean;
}

export function createRequestListener(ctx: SimContext): (req: IncomingMessage, res: ServerResponse) => void {
  return (req, res) => {
    const info: RequestInfo = {
      method: req.method ?? '',
      path: (req.url ?? '').split('?')[0] ?? '',
      ip: req.socket.remoteAddress,
    };
    const exchange: Exchange = { html: false, record: true };
    handle(ctx, req, res, info, exchange).catch((err: unknown) => respondWithError(ctx, res, info, exchange, err));
  };
}

async function handle(
  ctx: SimContext,
  req: IncomingMessage,
  res: ServerResponse,
  info: RequestInfo,
  exchange: Exchange,
): Promise<void> {
  const target = req.url ?? '';
  // Absolute-form targets ("POST http://host/path") would let a client choose the URL we verify against.
  if (!target.startsWith('/')) throw new SimError(400, 'request.target.invalid', 'request target must start with "/"');
  if (info.path.startsWith(CONTROL_PREFIX)) {
    exchange.record = false;
    const result = await handleControl(ctx, req, info.path);
    if (result.html === undefined) sendJson(res, ctx.clock, result.status, result.body);
    else sendHtml(res, ctx.clock, result.status, result.html);
    return;
  }
  const prefix = ctx.base().pathPrefix;
  const local = info.path.startsWith(`${prefix}/`) ? info.path.slice(prefix.length) : undefined;
  const pay = local === undefined ? null : PAY_PATH.exec(local);
  if (pay?.[1] !== undefined) {
    await servePaymentPage(ctx, req, res, info, exchange, pay[1]);
    return;
  }
  // The gateway's firewall sits in front of everything under /api/: a blocked source learns nothing, not even
  // which routes exist or that a fault is armed. Per-account allowlists follow once the account is known.
  if (local?.startsWith('/api/') === true) checkSourceIp(ctx, info, undefined);
  const kind = local === undefined ? undefined : API_ROUTES[local];
  if (kind === undefined) throw new SimError(404, 'request.route.not_found', `no route ${info.path}`);
  if (req.method !== 'POST') {
    throw new SimError(405, 'request.method.not_allowed', `use POST on ${info.path}`, {}, { allow: 'POST' });
  }
  const fault = ctx.faults.take(kind === 'token' ? 'token' : 'signed');
  const afterCommit = fault !== undefined && AFTER_COMMIT_KINDS.includes(fault.kind) ? fault : undefined;
  if (fault !== undefined && afterCommit === undefined && (await applyFault(ctx, req, res, info, fault))) return;
  if (kind === 'token') {
    const tokens = await handleTokenRequest(ctx, req, info);
    if (await answerAfterCommit(ctx, req, info, afterCommit)) sendJson(res, ctx.clock, 200, tokens);
    remember(ctx, info, 200, ACCEPTED, 'tokens issued');
    return;
  }
  const { status, body } = await handlePaymentInit(ctx, req, info, kind);
  if (await answerAfterCommit(ctx, req, info, afterCommit)) sendJson(res, ctx.clock, status, body);
  remember(ctx, info, status, ACCEPTED, `${kind} ${body.transaction_id ?? ''} created`);
}

/**
 * After the request was processed (a transaction recorded, tokens issued): false when a `commit-reset` cut the
 * connection instead of answering; a `commit-slow` answers late, past the client's deadline when it is long enough.
 */
async function answerAfterCommit(
  ctx: SimContext,
  req: IncomingMessage,
  info: RequestInfo,
  fault: ArmedFault | undefined,
): Promise<boolean> {
  if (fault === undefined) return true;
  ctx.logger.info({ event: 'sim.fault.applied', kind: fault.kind, method: info.method, path: info.path }, 'fault');
  if (fault.kind === 'commit-reset') {
    remember(ctx, info, undefined, 'sim.fault.commit_reset', 'processed, then connection reset (injected fault)');
    resetConnection(req.socket);
    return false;
  }
  if (await sleepUnlessAborted(fault.delayMs, ctx.closing)) return !req.socket.destroyed;
  req.socket.destroy();
  return false;
}

async function servePaymentPage(
  ctx: SimContext,
  req: IncomingMessage,
  res: ServerResponse,
  info: RequestInfo,
  exchange: Exchange,
  id: string,
): Promise<void> {
  exchange.html = true;
  if (req.method === 'GET') {
    exchange.record = false;
    sendHtml(res, ctx.clock, 200, paymentPageHtml(ctx, findTransaction(ctx, id)));
    return;
  }
  if (req.method !== 'POST') {
    throw new SimError(
      405,
      'request.method.not_allowed',
      `use GET or POST on ${info.path}`,
      {},
      { allow: 'GET, POST' },
    );
  }
  // The transaction's account, so the dashboard shows whose payment a refused post was aimed at.
  info.account = ctx.transactions.get(id)?.username;
  const tx = await completeFromPage(ctx, req, id);
  // Post/redirect/get: the browser shows the page with a GET, so a reload does not post the form again.
  res.sendDate = false;
  res.writeHead(303, {
    location: paymentPagePath(ctx, id),
    date: new Date(ctx.clock.nowMs()).toUTCString(),
    'cache-control': 'no-store',
    'content-length': 0,
  });
  res.end();
  remember(ctx, info, 303, ACCEPTED, `${id} completed as ${tx.status} on the payment page`);
}

const ACCEPTED = 'accepted';

/** Keeps the request for the dashboard: where it came from, what was answered and why. */
function remember(
  ctx: SimContext,
  info: RequestInfo,
  status: number | undefined,
  verdict: string,
  reason: string,
): void {
  ctx.requests.record({
    at: rfc3339(ctx.clock.nowMs()),
    method: info.method,
    path: info.path,
    ip: info.ip === undefined ? undefined : normalizeAddress(info.ip),
    account: info.account,
    status,
    verdict,
    reason,
  });
}

/** Returns true when the fault answered (or dropped) the request instead of normal processing. */
async function applyFault(
  ctx: SimContext,
  req: IncomingMessage,
  res: ServerResponse,
  info: RequestInfo,
  fault: ArmedFault,
): Promise<boolean> {
  ctx.logger.info({ event: 'sim.fault.applied', kind: fault.kind, method: info.method, path: info.path }, 'fault');
  if (fault.kind === 'delay') {
    if (await sleepUnlessAborted(fault.delayMs, ctx.closing)) return false;
    // Closed while waiting: the stores are stopped and nobody should get an answer from a closed simulator.
    req.socket.destroy();
    return true;
  }
  // Read the whole request first: these faults model a gateway that received it and then failed.
  await readBody(req, ctx.maxBodyBytes).catch(() => Buffer.alloc(0));
  if (fault.kind === 'reset') {
    remember(ctx, info, undefined, 'sim.fault.reset', 'connection reset (injected fault)');
    resetConnection(req.socket);
    return true;
  }
  throw faultError(fault);
}

function faultError(fault: ArmedFault): SimError {
  if (fault.kind === '401') return tokenRejected('access token is not valid (injected fault)', { fault: '401' });
  return new SimError(fault.status, 'sim.fault.injected', 'injected server error', { fault: fault.kind });
}

/** An RST rather than a FIN: what a crashed load balancer looks like to the client. */
function resetConnection(socket: Socket): void {
  try {
    socket.resetAndDestroy();
  } catch {
    socket.destroy();
  }
}

function respondWithError(
  ctx: SimContext,
  res: ServerResponse,
  info: RequestInfo,
  exchange: Exchange,
  err: unknown,
): void {
  const refusal = err instanceof SimError ? err : new SimError(500, 'sim.internal', 'internal simulator error');
  if (err instanceof SimError) {
    const fields = { event: 'request.refused', ...info, status: err.status, code: err.code, reason: err.message };
    ctx.logger.warn({ ...fields, ...err.details }, `refused ${info.method} ${info.path}: ${err.code}: ${err.message}`);
  } else {
    ctx.logger.error({ event: 'request.error', ...info, err }, 'simulator bug: unexpected error');
  }
  if (exchange.record) remember(ctx, info, refusal.status, refusal.code, refusal.message);
  if (exchange.html) sendHtml(res, ctx.clock, refusal.status, errorPageHtml(refusal), refusal.headers);
  else sendError(res, ctx.clock, refusal);
}
