// Routing and the one place where errors become responses. A handler either returns a result or throws a
// SimError; anything else is a simulator bug, answered 500 and logged, never a crash.
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import { CONTROL_PREFIX, handleControl } from './control-api.js';
import { SimError, tokenRejected } from './errors.js';
import { readBody, sendError, sendJson } from './http-io.js';
import { handlePaymentInit, paymentPageHtml } from './payment-routes.js';
import { checkSourceIp } from './signed-request.js';
import { sleepUnlessAborted } from './sleep.js';
import { handleTokenRequest } from './token-endpoint.js';
import type { RequestInfo, SimContext } from './context.js';
import type { ArmedFault } from './faults.js';

type RouteKind = 'token' | 'deposit' | 'withdrawal';

const API_ROUTES: Readonly<Record<string, RouteKind>> = {
  '/api/v2/auth/token': 'token',
  '/api/v2/transaction/init': 'deposit',
  '/api/v2/transfer-out/init': 'withdrawal',
};

export function createRequestListener(ctx: SimContext): (req: IncomingMessage, res: ServerResponse) => void {
  return (req, res) => {
    const info: RequestInfo = {
      method: req.method ?? '',
      path: (req.url ?? '').split('?')[0] ?? '',
      ip: req.socket.remoteAddress,
    };
    handle(ctx, req, res, info).catch((err: unknown) => respondWithError(ctx, res, info, err));
  };
}

async function handle(ctx: SimContext, req: IncomingMessage, res: ServerResponse, info: RequestInfo): Promise<void> {
  const target = req.url ?? '';
  // Absolute-form targets ("POST http://host/path") would let a client choose the URL we verify against.
  if (!target.startsWith('/')) throw new SimError(400, 'request.target.invalid', 'request target must start with "/"');
  if (info.path.startsWith(CONTROL_PREFIX)) {
    const result = await handleControl(ctx, req, info.path);
    sendJson(res, ctx.clock, result.status, result.body);
    return;
  }
  const prefix = ctx.base().pathPrefix;
  const local = info.path.startsWith(`${prefix}/`) ? info.path.slice(prefix.length) : undefined;
  const pay = local === undefined ? null : /^\/pay\/(txn_[0-9a-f]+)$/.exec(local);
  if (pay?.[1] !== undefined && req.method === 'GET') {
    sendPaymentPage(ctx, res, pay[1]);
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
  if (await applyFault(ctx, req, res, info, kind === 'token' ? 'token' : 'signed')) return;
  if (kind === 'token') {
    sendJson(res, ctx.clock, 200, await handleTokenRequest(ctx, req, info));
    return;
  }
  const { status, body } = await handlePaymentInit(ctx, req, info, kind);
  sendJson(res, ctx.clock, status, body);
}

function sendPaymentPage(ctx: SimContext, res: ServerResponse, id: string): void {
  const tx = ctx.transactions.get(id);
  if (tx === undefined) throw new SimError(404, 'request.route.not_found', `no transaction ${id}`);
  res.writeHead(200, { 'content-type': 'text/html; charset=utf-8', 'cache-control': 'no-store' });
  res.end(paymentPageHtml(tx));
}

/** Returns true when the fault answered (or dropped) the request instead of normal processing. */
async function applyFault(
  ctx: SimContext,
  req: IncomingMessage,
  res: ServerResponse,
  info: RequestInfo,
  target: 'signed' | 'token',
): Promise<boolean> {
  const fault = ctx.faults.take(target);
  if (fault === undefined) return false;
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

function respondWithError(ctx: SimContext, res: ServerResponse, info: RequestInfo, err: unknown): void {
  if (err instanceof SimError) {
    const fields = { event: 'request.refused', ...info, status: err.status, code: err.code, reason: err.message };
    ctx.logger.warn({ ...fields, ...err.details }, `refused ${info.method} ${info.path}: ${err.code}: ${err.message}`);
    sendError(res, ctx.clock, err);
    return;
  }
  ctx.logger.error({ event: 'request.error', ...info, err }, 'simulator bug: unexpected error');
  sendError(res, ctx.clock, new SimError(500, 'sim.internal', 'internal simulator error'));
}
