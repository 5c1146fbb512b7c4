import { Agent, request } from 'undici';
import { trustedCas } from './upstream-tls.js';
// The gateway's message is shown to help the operator, but bounded: it is untrusted text in a terminal.
const MAX_MESSAGE_CHARS = 200;
function field(body, name) {
    const value = body?.[name];
    return typeof value === 'string' ? value : undefined;
}
/** code/message of an error answer, with the password masked in case the gateway echoes the request. */
function errorSummary(body, password) {
    const code = field(body, 'code');
    const raw = field(body, 'message');
    const masked = raw === undefined || password === '' ? raw : raw.split(password).join('[redacted]');
    const message = masked?.slice(0, MAX_MESSAGE_CHARS);
    const parts = [code === undefined ? undefined : `code ${code}`, message === undefined ? undefined : `"${message}"`];
    return parts.filter((p) => p !== undefined).join(', ') || 'no code/message in the body';
}
function verdict(status, body, config) {
    const who = `as ${config.username}`;
    if (status === 200 && field(body, 'access_token') !== undefined) {
        const expires = field(body, 'access_token_expires_at') ?? 'an unstated time';
        return { mark: '✔', detail: `${who}: access token issued, valid until ${expires}` };
    }
    const summary = errorSummary(body, config.password.reveal());
    const hint = status === 403 ? ' (this host\'s outbound IP is probably not on the allowlist: spec 5.3)' :
        status === 401 ? ' (wrong username or password, or the account is not enabled for v2)' :
            status === 200 ? ' (HTTP 200 but no access_token in the body)' : '';
    return { mark: '✘', detail: `${who}: HTTP ${status}, ${summary}${hint}` };
}
/**
 * POSTs the password grant (spec 4.1) once. Also records the Date header and local timing for the skew check,
 * which works even when the login is refused. The tokens in the answer are discarded unprinted.
 */
export async function probeLogin(config) {
    const agent = new Agent({
        connect: { ca: trustedCas(config.upstream.ca), timeout: config.upstream.connectTimeoutMs },
        headersTimeout: config.upstream.responseTimeoutMs,
        bodyTimeout: config.upstream.responseTimeoutMs,
    });
    const url = `${config.base.origin}${config.base.pathPrefix}/api/v2/auth/token`;
    const payload = JSON.stringify({ grant_type: 'password', username: config.username, password: config.password.reveal() });
    try {
        const sentMs = Date.now();
        const res = await request(url, { method: 'POST', dispatcher: agent, headers: { 'content-type': 'application/json' }, body: payload });
        const receivedMs = Date.now();
        const text = await res.body.text();
        let body;
        try {
            body = JSON.parse(text);
        }
        catch {
            body = null;
        }
        const date = res.headers.date;
        const skew = typeof date === 'string' ? { dateHeader: date, sentMs, receivedMs } : undefined;
        return { ...verdict(res.statusCode, body, config), skew };
    }
    catch (err) {
        const code = err.code ?? err.message;
        return { mark: '✘', detail: `as ${config.username}: no answer from ${url} (${code})`, skew: undefined };
    }
    finally {
        await agent.close();
    }
}
