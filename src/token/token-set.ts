import type { Secret } from '../config/secret.js';

/**
 * The longest token taken, in bytes: it travels in a header, and servers refuse headers past 8 KB in total. Spec 2.1
 * gives no format; JWTs run to 1-2 KB.
 */
export const MAX_TOKEN_BYTES = 4_096;
/** RFC 6750's b64token: what may follow `Bearer ` in an Authorization header. */
const B64TOKEN = /^[A-Za-z0-9\-._~+/]+=*$/;

/**
 * Why a token cannot be used, from the gateway or the store alike; undefined when it can. The access token must be
 * a b64token that fits in a header (a `\r\n` in it could not be sent at all); the refresh token, sent in a JSON body,
 * only non-empty and as bounded.
 */
export function tokenFlaw(accessToken: string, refreshToken: string): string | undefined {
  if (!B64TOKEN.test(accessToken)) return 'access token is not a b64token (RFC 6750)';
  if (refreshToken === '') return 'refresh token is empty';
  if (Buffer.byteLength(accessToken) > MAX_TOKEN_BYTES || Buffer.byteLength(refreshToken) > MAX_TOKEN_BYTES)
    return `token longer than ${MAX_TOKEN_BYTES} bytes`;
  return undefined;
}

/** Tokens usable by requests: a token this close to expiry is treated as expired (it could die in transit). */
export const EXPIRY_MARGIN_MS = 2_000;

/** One generation of tokens. Deadlines are on the monotonic clock so a wall-clock jump cannot stall refreshes. */
export interface TokenSet {
  readonly generation: number;
  readonly accessToken: Secret;
  readonly refreshToken: Secret;
  /** Wall-clock expiry from the response (RFC 3339), for metrics and logs. */
  readonly accessExpiresAtMs: number;
  readonly refreshExpiresAtMs: number;
  /** Monotonic (performance.now) deadlines derived from the remaining lifetime at receipt. */
  readonly accessDeadline: number;
  readonly refreshDeadline: number;
  /**
   * Fleet mode only: the generation of the shared record these tokens are (undefined: got by this replica alone
   * while the store was away), and when the chain's login and these tokens were granted (gateway clock, ms).
   */
  readonly recordGeneration?: number | undefined;
  readonly loginAtMs?: number;
  readonly issuedAtMs?: number;
}

/** What the token endpoint said, already parsed; secrets wrapped so they cannot be logged by accident. */
export interface GrantedTokens {
  readonly accessToken: Secret;
  readonly refreshToken: Secret;
  readonly accessExpiresAtMs: number;
  readonly refreshExpiresAtMs: number;
  /** Remaining lifetimes at receipt in ms, measured against the gateway's clock when it sent a Date header. */
  readonly accessRemainingMs: number;
  readonly refreshRemainingMs: number;
}

export type GrantResult =
  | { readonly kind: 'granted'; readonly tokens: GrantedTokens }
  /**
   * The gateway answered and refused (wrong password, rotated or expired refresh token...). Its code only, with
   * the secrets the grant carried masked; never its message (token-client.ts says why).
   */
  | { readonly kind: 'rejected'; readonly status: number; readonly code: string | undefined }
  /** No usable answer. `sent` tells whether the request may have reached the gateway. */
  | { readonly kind: 'failed'; readonly sent: boolean; readonly reason: string };
