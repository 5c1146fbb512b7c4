// The control API under /_sim/: the levers a test or a vendor pulls (complete a transaction, shift the clock,
// inject faults, read the postback log), and the dashboard at /_sim/ itself. It is a backdoor, so it answers
// loopback clients only.
import type { IncomingMessage } from 'node:http';
import { AccountConfigError } from './accounts.js';
import { rfc3339 } from './clock.js';
import { dashboardHtml } from './dashboard.js';
import { SimError, badRequest } from './errors.js';
import { parseJsonObject, readBody, requireJsonContentType } from './http-io.js';
import { isLoopbackAddress } from './ip-allow.js';
import { TransactionStateError, transactionJson } from './transactions.js';
import type { SimContext } from './context.js';
import type { FaultKind, FaultTarget } from './faults.js';
import type { FinalStatus } from './transactions.js';

export const CONTROL_PREFIX = '/_sim/';

export interface ControlResult {
  readonly status: number;
  readonly body: unknown;
  /** Set for the dashboard: answered as this page instead of body as JSON. */
  readonly html?: string;
}

type Handler = (ctx: SimContext, req: IncomingMessage, param: string) => Promise<ControlResult> | ControlResult;

interface ControlRoute {
  readonly method: string;
  readonly pattern: RegExp;
  readonly handler: Handler;
}

const ok = (body: unknown): ControlResult => ({ status: 200, body });

const ROUTES: readonly ControlRoute[] = [
  { method: 'GET', pattern: /^$/, handler: dashboard },
  { method: 'GET', pattern: /^health$/, handler: () => ok({ status: 'ok' }) },
  { method: 'GET', pattern: /^transactions$/, handler: listTransactions },
  { method: 'GET', pattern: /^transactions\/([\w-]+)$/, handler: getTransaction },
  { method: 'POST', pattern: /^transactions\/([\w-]+)\/complete$/, handler: completeTransaction },
  { method: 'GET', pattern: /^clock$/, handler: (ctx) => ok(clockJson(ctx)) },
  { method: 'POST', pattern: /^clock$/, handler: setClock },
  { method: 'GET', pattern: /^faults$/, handler: (ctx) => ok({ faults: ctx.faults.list() }) },
  { method: 'POST', pattern: /^faults$/, handler: addFault },
  { method: 'DELETE', pattern: /^faults$/, handler: clearFaults },
  { method: 'GET', pattern: /^postbacks$/, handler: listPostbacks },
  { method: 'PUT', pattern: /^accounts\/([^/]+)\/public-keys$/, handler: setPublicKeys },
  { method: 'PUT', pattern: /^accounts\/([^/]+)\/password$/, handler: setPassword },
];

export async function handleControl(ctx: SimContext, req: IncomingMessage, path: string): Promise<ControlResult> {
  if (!isLoopbackAddress(req.socket.remoteAddress)) {
    throw new SimError(403, 'sim.control.forbidden', 'the control API answers loopback clients only');
  }
  if (!addressedToThisSimulator(req.headers.host, ctx.base().origin)) {
    throw new SimError(
      403,
      'sim.control.forbidden',
      'the control API answers requests addressed to localhost, a loopback address or the base URL host only',
    );
  }
  const rest = path.slice(CONTROL_PREFIX.length);
  const matching = ROUTES.filter((r) => r.pattern.test(rest));
  if (matching.length === 0) throw new SimError(404, 'request.route.not_found', `no control route ${path}`);
  const route = matching.find((r) => r.method === req.method);
  if (route === undefined) {
    const allow = matching.map((r) => r.method).join(', ');
    throw new SimError(405, 'request.method.not_allowed', `use ${allow} on ${path}`, {}, { allow });
  }
  // A web page can POST text/plain cross-origin without a preflight; insisting on JSON makes the browser ask
  // first (CORS preflight, which we never approve), so a page the developer visits can't pull these levers.
  if (route.method !== 'GET') requireJsonContentType(req);
  return route.handler(ctx, req, route.pattern.exec(rest)?.[1] ?? '');
}

/**
 * DNS rebinding: a page the developer visits can point its own name at 127.0.0.1 and then call the control API as
 * a same-origin loopback client, JSON included. Its requests still carry its own name in Host, which no client of
 * this simulator uses. No Host at all (HTTP/1.0) is no browser's, so it passes.
 */
function addressedToThisSimulator(host: string | undefined, baseOrigin: string): boolean {
  if (host === undefined) return true;
  let hostname: string;
  try {
    hostname = new URL(`http://${host}`).hostname;
  } catch {
    return false;
  }
  if (hostname === 'localhost' || hostname.endsWith('.localhost')) return true; // RFC 6761: always loopback
  if (hostname === new URL(baseOrigin).hostname) return true;
  return isLoopbackAddress(hostname.replace(/^\[|\]$/g, '')); // 127.0.0.0/8, [::1]
}

async function jsonBody(ctx: SimContext, req: IncomingMessage): Promise<Record<string, unknown>> {
  const body = await readBody(req, ctx.maxBodyBytes);
  return body.length === 0 ? {} : parseJsonObject(body);
}

/** The longest auto-reload period the dashboard offers; a bigger one is a typo, not a wish. */
const MAX_REFRESH_SECONDS = 3600;

function dashboard(ctx: SimContext, req: IncomingMessage): ControlResult {
  const raw = new URL(req.url ?? '/', 'http://simulator.invalid').searchParams.get('refresh');
  const seconds = raw === null ? undefined : Number(raw);
  if (seconds !== undefined && (!Number.isInteger(seconds) || seconds < 1 || seconds > MAX_REFRESH_SECONDS)) {
    throw badRequest('sim.refresh.invalid', `refresh must be whole seconds, 1..${MAX_REFRESH_SECONDS}`);
  }
  return { status: 200, body: undefined, html: dashboardHtml(ctx, seconds) };
}

function listTransactions(ctx: SimContext): ControlResult {
  return ok({ transactions: ctx.transactions.list().map(transactionJson) });
}

function getTransaction(ctx: SimContext, _req: IncomingMessage, id: string): ControlResult {
  const tx = ctx.transactions.get(id);
  if (tx === undefined) throw new SimError(404, 'sim.transaction.not_found', `no transaction ${id}`);
  return ok(transactionJson(tx));
}

async function completeTransaction(ctx: SimContext, req: IncomingMessage, id: string): Promise<ControlResult> {
  const { status } = await jsonBody(ctx, req);
  if (status !== 'SUCCESS' && status !== 'FAILED') {
    throw badRequest('sim.status.invalid', 'status must be "SUCCESS" or "FAILED"');
  }
  try {
    return ok(transactionJson(ctx.transactions.complete(id, status satisfies FinalStatus)));
  } catch (err) {
    if (!(err instanceof TransactionStateError)) throw err;
    const code = err.kind === 'not_found' ? 'sim.transaction.not_found' : 'sim.transaction.already_final';
    throw new SimError(err.kind === 'not_found' ? 404 : 409, code, err.message);
  }
}

function clockJson(ctx: SimContext): Record<string, unknown> {
  return {
    offset_seconds: ctx.clock.offsetSeconds(),
    now: rfc3339(ctx.clock.nowMs()),
    now_unix: ctx.clock.nowSeconds(),
  };
}

async function setClock(ctx: SimContext, req: IncomingMessage): Promise<ControlResult> {
  const body = await jsonBody(ctx, req);
  const { offset_seconds: offset, shift_seconds: shift } = body;
  try {
    if (typeof offset === 'number' && shift === undefined) ctx.clock.setOffset(offset);
    else if (typeof shift === 'number' && offset === undefined) ctx.clock.shift(shift);
    else throw badRequest('sim.clock.invalid', 'send {"offset_seconds": n} (absolute) or {"shift_seconds": n}');
  } catch (err) {
    // The clock refuses non-finite and out-of-range offsets and keeps its old value.
    if (err instanceof RangeError) throw badRequest('sim.clock.invalid', err.message);
    throw err;
  }
  ctx.logger.info({ event: 'sim.clock', offsetSeconds: ctx.clock.offsetSeconds() }, 'clock shifted');
  return ok(clockJson(ctx));
}

async function addFault(ctx: SimContext, req: IncomingMessage): Promise<ControlResult> {
  const body = await jsonBody(ctx, req);
  // Wrong types pass through uncoerced so validation refuses them instead of silently using a default.
  const num = (key: string): number | undefined => (body[key] === undefined ? undefined : (body[key] as number));
  try {
    const fault = ctx.faults.add({
      kind: body.kind as FaultKind,
      count: num('count'),
      delayMs: num('delay_ms'),
      status: num('status'),
      target: body.target as FaultTarget | undefined,
    });
    ctx.logger.info({ event: 'sim.fault', ...fault }, 'fault armed');
    return { status: 201, body: { fault, faults: ctx.faults.list() } };
  } catch (err) {
    if (err instanceof RangeError) throw badRequest('sim.fault.invalid', err.message);
    throw err;
  }
}

function clearFaults(ctx: SimContext): ControlResult {
  ctx.faults.clear();
  return ok({ faults: [] });
}

/** A password rotation as the vendor's portal does it: `{"password": "..."}`; the old one stops working at once. */
async function setPassword(ctx: SimContext, req: IncomingMessage, param: string): Promise<ControlResult> {
  const username = decodeURIComponent(param);
  const account = ctx.accounts.get(username);
  if (account === undefined) throw new SimError(404, 'sim.account.not_found', `no account ${username}`);
  const { password } = await jsonBody(ctx, req);
  if (typeof password !== 'string' || password === '') {
    throw badRequest('sim.password.invalid', 'send {"password": "..."}, a non-empty string');
  }
  account.setPassword(password);
  // Never the password itself, nor a digest of it.
  ctx.logger.info({ event: 'sim.password', account: username }, 'password rotated');
  return ok({ account: username });
}

/** A key rotation as the vendor does it: `{"public_keys_pem": [old, new]}`, later `[new]`. */
async function setPublicKeys(ctx: SimContext, req: IncomingMessage, param: string): Promise<ControlResult> {
  const username = decodeURIComponent(param);
  const account = ctx.accounts.get(username);
  if (account === undefined) throw new SimError(404, 'sim.account.not_found', `no account ${username}`);
  const { public_keys_pem: pems } = await jsonBody(ctx, req);
  if (!Array.isArray(pems) || !pems.every((pem): pem is string => typeof pem === 'string')) {
    throw badRequest('sim.public_keys.invalid', 'send {"public_keys_pem": ["-----BEGIN PUBLIC KEY-----..."]}');
  }
  try {
    account.setPublicKeys(pems);
  } catch (err) {
    if (err instanceof AccountConfigError) throw badRequest('sim.public_keys.invalid', err.message);
    throw err;
  }
  ctx.logger.info({ event: 'sim.public_keys', account: username, count: pems.length }, 'public keys replaced');
  return ok({ account: username, public_keys: pems.length });
}

function listPostbacks(ctx: SimContext): ControlResult {
  const postbacks = ctx.postbacks.attempts().map((a) => ({
    transaction_id: a.transactionId,
    url: a.url,
    attempt: a.attempt,
    signed: a.signed,
    at: a.at,
    status: a.status ?? null,
    error: a.error ?? null,
    delivered: a.delivered,
  }));
  return ok({ postbacks });
}
