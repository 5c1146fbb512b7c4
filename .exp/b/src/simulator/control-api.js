import { rfc3339 } from './clock.js';
import { SimError, badRequest } from './errors.js';
import { parseJsonObject, readBody } from './http-io.js';
import { isLoopbackAddress } from './ip-allow.js';
import { TransactionStateError, transactionJson } from './transactions.js';
export const CONTROL_PREFIX = '/_sim/';
const ok = (body) => ({ status: 200, body });
const ROUTES = [
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
];
export async function handleControl(ctx, req, path) {
    if (!isLoopbackAddress(req.socket.remoteAddress)) {
        throw new SimError(403, 'sim.control.forbidden', 'the control API answers loopback clients only');
    }
    const rest = path.slice(CONTROL_PREFIX.length);
    const matching = ROUTES.filter((r) => r.pattern.test(rest));
    if (matching.length === 0)
        throw new SimError(404, 'request.route.not_found', `no control route ${path}`);
    const route = matching.find((r) => r.method === req.method);
    if (route === undefined) {
        const allow = matching.map((r) => r.method).join(', ');
        throw new SimError(405, 'request.method.not_allowed', `use ${allow} on ${path}`, {}, { allow });
    }
    return route.handler(ctx, req, route.pattern.exec(rest)?.[1] ?? '');
}
async function jsonBody(ctx, req) {
    const body = await readBody(req, ctx.maxBodyBytes);
    return body.length === 0 ? {} : parseJsonObject(body);
}
function listTransactions(ctx) {
    return ok({ transactions: ctx.transactions.list().map(transactionJson) });
}
function getTransaction(ctx, _req, id) {
    const tx = ctx.transactions.get(id);
    if (tx === undefined)
        throw new SimError(404, 'sim.transaction.not_found', `no transaction ${id}`);
    return ok(transactionJson(tx));
}
async function completeTransaction(ctx, req, id) {
    const { status } = await jsonBody(ctx, req);
    if (status !== 'SUCCESS' && status !== 'FAILED') {
        throw badRequest('sim.status.invalid', 'status must be "SUCCESS" or "FAILED"');
    }
    try {
        return ok(transactionJson(ctx.transactions.complete(id, status)));
    }
    catch (err) {
        if (!(err instanceof TransactionStateError))
            throw err;
        const code = err.kind === 'not_found' ? 'sim.transaction.not_found' : 'sim.transaction.already_final';
        throw new SimError(err.kind === 'not_found' ? 404 : 409, code, err.message);
    }
}
function clockJson(ctx) {
    return {
        offset_seconds: ctx.clock.offsetSeconds(),
        now: rfc3339(ctx.clock.nowMs()),
        now_unix: ctx.clock.nowSeconds(),
    };
}
async function setClock(ctx, req) {
    const body = await jsonBody(ctx, req);
    const { offset_seconds: offset, shift_seconds: shift } = body;
    if (typeof offset === 'number' && Number.isFinite(offset) && shift === undefined)
        ctx.clock.setOffset(offset);
    else if (typeof shift === 'number' && Number.isFinite(shift) && offset === undefined)
        ctx.clock.shift(shift);
    else
        throw badRequest('sim.clock.invalid', 'send {"offset_seconds": n} (absolute) or {"shift_seconds": n}');
    ctx.logger.info({ event: 'sim.clock', offsetSeconds: ctx.clock.offsetSeconds() }, 'clock shifted');
    return ok(clockJson(ctx));
}
async function addFault(ctx, req) {
    const body = await jsonBody(ctx, req);
    // Wrong types pass through uncoerced so validation refuses them instead of silently using a default.
    const num = (key) => (body[key] === undefined ? undefined : body[key]);
    try {
        const fault = ctx.faults.add({
            kind: body.kind,
            count: num('count'),
            delayMs: num('delay_ms'),
            status: num('status'),
            target: body.target,
        });
        ctx.logger.info({ event: 'sim.fault', ...fault }, 'fault armed');
        return { status: 201, body: { fault, faults: ctx.faults.list() } };
    }
    catch (err) {
        if (err instanceof RangeError)
            throw badRequest('sim.fault.invalid', err.message);
        throw err;
    }
}
function clearFaults(ctx) {
    ctx.faults.clear();
    return ok({ faults: [] });
}
function listPostbacks(ctx) {
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
