import type { BaseAddress } from '../config/base-url.js';
import { maskSecrets, Secret } from '../config/secret.js';
import type { GatewayClient } from '../upstream/gateway-client.js';
import { jsonObject, type UpstreamResponse } from '../upstream/gateway-answer.js';
import { isSuccessStatus } from '../upstream/http-status.js';
import { tokenFlaw, type GrantResult, type GrantedTokens } from './token-set.js';

export const TOKEN_PATH = '/api/v2/auth/token';

/** The password grant's body (spec 4.1); `check` sends the very same one. */
export function passwordGrant(username: string, password: Secret): Record<string, string> {
  return { grant_type: 'password', username, password: password.reveal() };
}

export interface TokenClient {
  passwordGrant(): Promise<GrantResult>;
  refreshGrant(refreshToken: Secret): Promise<GrantResult>;
}

export interface TokenClientOptions {
  readonly base: BaseAddress;
  readonly username: string;
  /**
   * Read at each password grant, never before: a rotated SIDECAR_PASSWORD_FILE is used at the next login, and
   * nothing logs in because a password changed (a login revokes the tokens of every replica of the account).
   */
  readonly password: () => Secret;
  /** Name of the body field carrying the refresh token (not in the spec; default "refresh_token"). */
  readonly refreshTokenField: string;
  readonly now: () => number;
}

/** The two grants of spec 4.1 as plain JSON POSTs (the token endpoint is not signed). */
export function createTokenClient(gatewayClient: GatewayClient, options: TokenClientOptions): TokenClient {
  /** `carried`: the secrets in this body, masked in whatever of the answer is kept (an echo must not leak them). */
  const post = async (body: Record<string, string>, carried: Secret): Promise<GrantResult> => {
    const outcome = await gatewayClient.send({
      path: `${options.base.pathPrefix}${TOKEN_PATH}`,
      headers: { 'content-type': 'application/json', accept: 'application/json' },
      body: JSON.stringify(body),
    });
    if (outcome.kind === 'not_sent') return { kind: 'failed', sent: false, reason: describe(outcome.error) };
    if (outcome.kind === 'sent_no_answer') return { kind: 'failed', sent: true, reason: describe(outcome.error) };
    return interpret(outcome.response, options.now(), carried);
  };
  return {
    passwordGrant: () => {
      const password = options.password();
      return post(passwordGrant(options.username, password), password);
    },
    refreshGrant: (refreshToken) =>
      post({ grant_type: 'refresh_token', [options.refreshTokenField]: refreshToken.reveal() }, refreshToken),
  };
}

function describe(error: Error): string {
  const code = (error as { code?: string }).code;
  return code ? `${code}: ${error.message}` : error.message;
}

// A gateway code is a short identifier (spec 7); anything longer is cut, after masking.
const MAX_CODE_CHARS = 100;

function interpret(response: UpstreamResponse, nowMs: number, carried: Secret): GrantResult {
  const body = jsonObject(response.body);
  if (isSuccessStatus(response.status)) {
    const tokens = body ? parseTokens(body, gatewayNow(response, nowMs)) : undefined;
    if (tokens === undefined)
      return { kind: 'failed', sent: true, reason: `token response ${response.status} lacks the fields of spec 2.1` };
    if (typeof tokens === 'string') return { kind: 'failed', sent: true, reason: `token response: ${tokens}` };
    return { kind: 'granted', tokens };
  }
  if (response.status >= 500) return { kind: 'failed', sent: true, reason: `gateway answered ${response.status}` };
  // Only the code is kept, masked: the message is free text that may echo the request in forms no mask can
  // foresee (cut, re-encoded), and what an operator acts on is the grant, the status and the code.
  const code = typeof body?.code === 'string' ? maskSecrets(body.code, [carried]).slice(0, MAX_CODE_CHARS) : undefined;
  return { kind: 'rejected', status: response.status, code };
}

/**
 * Expiry fields are in the gateway's clock. Measuring the remaining lifetime against its Date header (when
 * present and earlier than ours would suggest) keeps a local clock that runs behind from refreshing too late.
 */
function gatewayNow(response: UpstreamResponse, localNowMs: number): number {
  const date = response.headers.date;
  const parsed = typeof date === 'string' ? Date.parse(date) : Number.NaN;
  return Number.isNaN(parsed) ? localNowMs : Math.max(localNowMs, parsed);
}

/** The grant; undefined when fields are missing; why the tokens cannot be used (never the tokens themselves). */
function parseTokens(body: Record<string, unknown>, nowMs: number): GrantedTokens | string | undefined {
  const { access_token, refresh_token, access_token_expires_at, refresh_token_expires_at } = body;
  if (typeof access_token !== 'string' || typeof refresh_token !== 'string') return undefined;
  if (access_token === '' || refresh_token === '') return undefined;
  const flaw = tokenFlaw(access_token, refresh_token);
  if (flaw !== undefined) return flaw;
  const accessAt = typeof access_token_expires_at === 'string' ? Date.parse(access_token_expires_at) : Number.NaN;
  const refreshAt = typeof refresh_token_expires_at === 'string' ? Date.parse(refresh_token_expires_at) : Number.NaN;
  if (Number.isNaN(accessAt) || Number.isNaN(refreshAt)) return undefined;
  // A token that is already expired on arrival (bad fields, or a clock far off) is no grant: treating it as one
  // would refresh in a loop; as a failure it goes through the backoff.
  if (accessAt <= nowMs || refreshAt <= nowMs) return undefined;
  return {
    accessToken: new Secret(access_token),
    refreshToken: new Secret(refresh_token),
    accessExpiresAtMs: accessAt,
    refreshExpiresAtMs: refreshAt,
    accessRemainingMs: accessAt - nowMs,
    refreshRemainingMs: refreshAt - nowMs,
  };
}
