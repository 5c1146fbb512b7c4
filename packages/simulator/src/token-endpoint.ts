// POST /api/v2/auth/token (spec 4.1). Status codes and error bodies are not in the spec; our choices:
// 200 with exactly the four fields of 2.1, 401 {code: FAILED} for wrong credentials or a dead refresh token
// (the same shape as a rejected access token, so one client rule covers both), 400 for a malformed request.
import type { IncomingMessage } from 'node:http';
import { rfc3339 } from './clock.js';
import { SimError, badRequest, tokenRejected } from './errors.js';
import { parseJsonObject, readBody, requireJsonContentType } from './http-io.js';
import { checkSourceIp } from './signed-request.js';
import type { RequestInfo, SimContext } from './context.js';
import type { IssuedTokens } from './token-store.js';

export interface TokenResponse {
  readonly access_token: string;
  readonly access_token_expires_at: string;
  readonly refresh_token: string;
  readonly refresh_token_expires_at: string;
}

export async function handleTokenRequest(
  ctx: SimContext,
  req: IncomingMessage,
  info: RequestInfo,
): Promise<TokenResponse> {
  // The firewall check comes first; the account's own allowlist is checked once the account is known.
  checkSourceIp(ctx, info, undefined);
  requireJsonContentType(req);
  const body = parseJsonObject(await readBody(req, ctx.maxBodyBytes));
  const grant = body.grant_type;
  if (grant === 'password') return toResponse(passwordGrant(ctx, body, info));
  if (grant === 'refresh_token') return toResponse(refreshGrant(ctx, body, info));
  // Only the type is echoed: a confused client may put anything (even the password) in this field.
  const got = grant === undefined ? 'nothing' : grant === null ? 'null' : `a ${typeof grant}`;
  throw badRequest(
    'token.grant_type.unsupported',
    `unsupported grant_type (${got}); use "password" or "refresh_token"`,
  );
}

function passwordGrant(ctx: SimContext, body: Record<string, unknown>, info: RequestInfo): IssuedTokens {
  const { username, password } = body;
  if (typeof username !== 'string' || typeof password !== 'string') {
    throw badRequest('token.request.invalid', 'password grant needs "username" and "password" as JSON strings');
  }
  const account = ctx.accounts.get(username);
  // The account's allowlist before its password: otherwise a source allowed for another account could tell a
  // right password (403) from a wrong one (401) and guess passwords of accounts it may not use.
  if (account !== undefined) {
    info.account = username;
    checkSourceIp(ctx, info, username);
  }
  // One message for unknown user and wrong password, like a real login, so the endpoint does not list accounts.
  if (account === undefined || !account.passwordMatches(password)) {
    throw tokenRejected('invalid username or password', {
      credentialProblem: account === undefined ? 'unknown username' : 'wrong password',
    });
  }
  return ctx.tokens.passwordLogin(username);
}

function refreshGrant(ctx: SimContext, body: Record<string, unknown>, info: RequestInfo): IssuedTokens {
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
  if (result.ok) return result.tokens;
  const why = {
    unknown: 'refresh token is not valid',
    rotated: 'refresh token was already used; store the latest one or log in with the password',
    expired: 'refresh token has expired; log in with the password',
    superseded: 'refresh token was revoked by a newer password login',
  }[result.reason];
  throw new SimError(401, 'FAILED', why, { tokenProblem: result.reason });
}

function toResponse(tokens: IssuedTokens): TokenResponse {
  return {
    access_token: tokens.accessToken,
    access_token_expires_at: rfc3339(tokens.accessExpiresAtMs),
    refresh_token: tokens.refreshToken,
    refresh_token_expires_at: rfc3339(tokens.refreshExpiresAtMs),
  };
}
