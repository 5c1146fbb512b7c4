import { Secret } from '../config/secret.js';
export const TOKEN_PATH = '/api/v2/auth/token';
/** The two grants of spec 4.1 as plain JSON POSTs (the token endpoint is not signed). */
export function createTokenClient(forwarder, options) {
    const post = async (body) => {
        const outcome = await forwarder.send({
            path: `${options.base.pathPrefix}${TOKEN_PATH}`,
            headers: { 'content-type': 'application/json', accept: 'application/json' },
            body: JSON.stringify(body),
        });
        if (outcome.kind === 'not_sent')
            return { kind: 'failed', sent: false, reason: describe(outcome.error) };
        if (outcome.kind === 'sent_no_answer')
            return { kind: 'failed', sent: true, reason: describe(outcome.error) };
        return interpret(outcome.response, options.now());
    };
    return {
        passwordGrant: () => post({ grant_type: 'password', username: options.username, password: options.password.reveal() }),
        refreshGrant: (refreshToken) => post({ grant_type: 'refresh_token', [options.refreshTokenField]: refreshToken.reveal() }),
    };
}
function describe(error) {
    const code = error.code;
    return code ? `${code}: ${error.message}` : error.message;
}
function interpret(response, nowMs) {
    const body = parseJson(response.body);
    if (response.status >= 200 && response.status < 300) {
        const tokens = body ? parseTokens(body, gatewayNow(response, nowMs)) : undefined;
        if (tokens)
            return { kind: 'granted', tokens };
        return { kind: 'failed', sent: true, reason: `token response ${response.status} lacks the fields of spec 2.1` };
    }
    if (response.status >= 500)
        return { kind: 'failed', sent: true, reason: `gateway answered ${response.status}` };
    return {
        kind: 'rejected',
        status: response.status,
        code: typeof body?.code === 'string' ? body.code : undefined,
        message: typeof body?.message === 'string' ? body.message.slice(0, 200) : undefined,
    };
}
function parseJson(bytes) {
    try {
        const value = JSON.parse(bytes.toString('utf8'));
        return typeof value === 'object' && value !== null && !Array.isArray(value) ? value : undefined;
    }
    catch {
        return undefined;
    }
}
/**
 * Expiry fields are in the gateway's clock. Measuring the remaining lifetime against its Date header (when
 * present and earlier than ours would suggest) keeps a local clock that runs behind from refreshing too late.
 */
function gatewayNow(response, localNowMs) {
    const date = response.headers.date;
    const parsed = typeof date === 'string' ? Date.parse(date) : Number.NaN;
    return Number.isNaN(parsed) ? localNowMs : Math.max(localNowMs, parsed);
}
function parseTokens(body, nowMs) {
    const { access_token, refresh_token, access_token_expires_at, refresh_token_expires_at } = body;
    if (typeof access_token !== 'string' || typeof refresh_token !== 'string')
        return undefined;
    if (access_token === '' || refresh_token === '')
        return undefined;
    const accessAt = typeof access_token_expires_at === 'string' ? Date.parse(access_token_expires_at) : Number.NaN;
    const refreshAt = typeof refresh_token_expires_at === 'string' ? Date.parse(refresh_token_expires_at) : Number.NaN;
    if (Number.isNaN(accessAt) || Number.isNaN(refreshAt))
        return undefined;
    return {
        accessToken: new Secret(access_token),
        refreshToken: new Secret(refresh_token),
        accessExpiresAtMs: accessAt,
        refreshExpiresAtMs: refreshAt,
        accessRemainingMs: accessAt - nowMs,
        refreshRemainingMs: refreshAt - nowMs,
    };
}
