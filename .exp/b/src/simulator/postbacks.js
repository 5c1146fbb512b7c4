// Postback delivery (spec 6). The spec leaves body, signing string and retries open; our documented choices:
// body `{"data": base64(JSON)}` like requests, signing string `POST.<webhook URL>.TS.NONCE.<data>` with the
// simulator's own key, a fresh timestamp and nonce per attempt, exponential backoff until a 2xx.
import { constants, randomBytes, sign } from 'node:crypto';
import { request } from 'undici';
import { signedUrlFor, parsePublicBase } from './canonical-url.js';
import { buildSigningString } from './verifier.js';
export function createPostbackSender(deps) {
    const log = [];
    const abort = new AbortController();
    const running = new Set();
    const run = (target, tx) => {
        const job = deliver(deps, target, tx, abort.signal, (a) => log.push(a));
        running.add(job);
        void job.finally(() => running.delete(job));
    };
    return {
        send: run,
        attempts: () => [...log],
        async close() {
            abort.abort();
            await Promise.allSettled([...running]);
        },
    };
}
/** The postback payload: the final state of the transaction, the fields a vendor needs to reconcile it. */
export function postbackPayload(tx) {
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
async function deliver(deps, target, tx, signal, record) {
    const { initialDelayMs = 1000, maxDelayMs = 60_000, maxAttempts = 50 } = deps.retry;
    const data = Buffer.from(JSON.stringify(postbackPayload(tx)), 'utf8').toString('base64');
    for (let attempt = 1; maxAttempts === 0 || attempt <= maxAttempts; attempt++) {
        if (signal.aborted)
            return;
        const result = await attemptOnce(deps, target, data, signal);
        const entry = { transactionId: tx.id, url: target.url, attempt, signed: target.signed, ...result };
        record({ ...entry, at: new Date().toISOString(), delivered: isSuccess(result.status) });
        deps.logger.info({ event: 'postback.attempt', ...entry }, 'postback attempt');
        if (isSuccess(result.status))
            return;
        const delay = Math.min(initialDelayMs * 2 ** (attempt - 1), maxDelayMs);
        if (!(await sleep(delay, signal)))
            return;
    }
    deps.logger.warn({ event: 'postback.abandoned', transactionId: tx.id, url: target.url }, 'postback abandoned');
}
function isSuccess(status) {
    return status !== undefined && status >= 200 && status < 300;
}
async function attemptOnce(deps, target, data, signal) {
    const body = JSON.stringify({ data });
    const headers = { 'content-type': 'application/json' };
    if (target.signed)
        Object.assign(headers, await signatureHeaders(deps, target.url, data));
    const timeoutMs = deps.retry.timeoutMs ?? 10_000;
    try {
        const res = await request(target.url, {
            method: 'POST',
            headers,
            body,
            signal,
            headersTimeout: timeoutMs,
            bodyTimeout: timeoutMs,
        });
        await res.body.dump();
        return { status: res.statusCode, error: undefined };
    }
    catch (err) {
        return { status: undefined, error: err.message };
    }
}
async function signatureHeaders(deps, url, data) {
    const timestamp = String(deps.clock.nowSeconds());
    const nonce = randomBytes(16).toString('base64url');
    const parsed = new URL(url);
    const fullUrl = signedUrlFor(parsePublicBase(parsed.origin), parsed.pathname + parsed.search);
    const signingString = buildSigningString({ method: 'POST', fullUrl, timestamp, nonce, data });
    const signature = await new Promise((resolve, reject) => {
        sign('sha256', Buffer.from(signingString, 'utf8'), { key: deps.privateKey, padding: constants.RSA_PKCS1_PADDING }, (err, sig) => (err === null ? resolve(sig) : reject(err)));
    });
    return { 'x-timestamp': timestamp, 'x-nonce': nonce, 'x-signature': signature.toString('base64') };
}
/** Resolves true after `ms`, or false as soon as the simulator closes. */
function sleep(ms, signal) {
    return new Promise((resolve) => {
        if (signal.aborted)
            return resolve(false);
        const timer = setTimeout(() => {
            signal.removeEventListener('abort', onAbort);
            resolve(true);
        }, ms);
        const onAbort = () => {
            clearTimeout(timer);
            resolve(false);
        };
        signal.addEventListener('abort', onAbort, { once: true });
    });
}
