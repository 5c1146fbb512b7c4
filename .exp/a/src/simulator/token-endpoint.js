import { rfc3339 } from './clock.js';
import { SimError, badRequest, tokenRejected } from './errors.js';
import { parseJsonObject, readBody, requireJsonContentType } from './http-io.js';
import { checkSourceIp } from './signed-request.js';
export async function handleTokenRequest(ctx, req, info) {
    // The firewall check comes first; the account's own allowlist is checked once the account is known.
    checkSourceIp(ctx, info, undefined);
    requireJsonContentType(req);
    const body = parseJsonObject(await readBody(req, ctx.maxBodyBytes));
    const grant = body.grant_type;
    if (grant === 'password')
        return toResponse(passwordGrant(ctx, body, info));
    if (grant === 'refresh_token')
        return toResponse(refreshGrant(ctx, body, info));
    throw badRequest('token.grant_type.unsupported', `grant_type must be "password" or "refresh_token", got ${JSON.stringify(grant) ?? 'nothing'}`);
}
function passwordGrant(ctx, body, info) {
    const { username, password } = body;
    if (typeof username !== 'string' || typeof password !== 'string') {
        throw badRequest('token.request.invalid', 'password grant needs "username" and "password" as JSON strings');
    }
    const account = ctx.accounts.get(username);
    // One message for unknown user and wrong password, like a real login, so the endpoint does not list accounts.
    if (account === undefined || !account.passwordMatches(password)) {
        throw tokenRejected('invalid username or password', {
            credentialProblem: account === undefined ? 'unknown username' : 'wrong password',
        });
    }
    info.account = username;
    checkSourceIp(ctx, info, username);
    return ctx.tokens.passwordLogin(username);
}
function refreshGrant(ctx, body, info) {
    const field = ctx.refreshTokenField;
    const token = body[field];
    if (typeof token !== 'string' || token === '') {
        throw badRequest('token.request.invalid', `refresh grant needs "${field}" as a non-empty JSON string`);
    }
    const owner = ctx.tokens.refreshOwner(token);
    if (owner !== undefined) {
        info.account = owner;
        checkSourceIp(ctx, info, owner);
    }
    const result = ctx.tokens.refresh(token);
    if (result.ok)
        return result.tokens;
    const why = {
        unknown: 'refresh token is not valid',
        rotated: 'refresh token was already used; store the latest one or log in with the password',
        expired: 'refresh token has expired; log in with the password',
        superseded: 'refresh token is not valid',
    }[result.reason];
    throw new SimError(401, 'FAILED', why, { tokenProblem: result.reason });
}
function toResponse(tokens) {
    return {
        access_token: tokens.accessToken,
        access_token_expires_at: rfc3339(tokens.accessExpiresAtMs),
        refresh_token: tokens.refreshToken,
        refresh_token_expires_at: rfc3339(tokens.refreshExpiresAtMs),
    };
}
