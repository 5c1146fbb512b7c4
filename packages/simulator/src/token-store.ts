// Access and refresh tokens, with the three rules of spec 4.1: refresh rotates (the old refresh token dies),
// a password login supersedes every access token issued before it, and both kinds expire. With
// `loginRevokesRefresh`, a login also revokes every earlier refresh token (a stricter gateway the spec allows).
// Lifetimes are measured on the simulator's clock, so shifting the clock expires tokens without waiting.
import { randomBytes } from 'node:crypto';
import type { SimClock } from './clock.js';

export const DEFAULT_ACCESS_TOKEN_TTL_SECONDS = 15 * 60;
export const DEFAULT_REFRESH_TOKEN_TTL_SECONDS = 8 * 60 * 60;

export interface IssuedTokens {
  readonly accessToken: string;
  readonly accessExpiresAtMs: number;
  readonly refreshToken: string;
  readonly refreshExpiresAtMs: number;
}

/** Why a token was refused, precise enough for the log line a vendor reads while debugging. */
export type TokenCheck =
  | { readonly ok: true; readonly username: string }
  | {
      readonly ok: false;
      readonly reason: 'unknown' | 'expired' | 'superseded' | 'rotated';
      readonly username?: string;
    };

interface AccessRecord {
  readonly username: string;
  readonly expiresAtMs: number;
  /** Login generation at issue time; a later password login bumps the account's generation. */
  readonly generation: number;
}

interface RefreshRecord {
  readonly username: string;
  readonly expiresAtMs: number;
  /** Login generation at issue time, as for access tokens. */
  readonly generation: number;
  rotated: boolean;
}

/** How many grants the token endpoint made (successful ones), per kind: what tests count logins with. */
export interface GrantCounts {
  readonly password: number;
  readonly refresh: number;
}

export interface TokenStoreOptions {
  readonly accessSeconds: number;
  readonly refreshSeconds: number;
  /** A password login also invalidates every earlier refresh token of the account. Default false. */
  readonly loginRevokesRefresh?: boolean;
}

export interface TokenStore {
  passwordLogin(username: string): IssuedTokens;
  /** Rotates: on success the presented refresh token can never be used again. */
  refresh(refreshToken: string): { ok: true; tokens: IssuedTokens } | Exclude<TokenCheck, { ok: true }>;
  checkAccess(accessToken: string): TokenCheck;
  /** The account a token belongs to, valid or not: used to pick the allowlist before judging the token. */
  ownerOf(accessToken: string): string | undefined;
  refreshOwner(refreshToken: string): string | undefined;
  grants(): GrantCounts;
}

export function createTokenStore(clock: SimClock, ttl: TokenStoreOptions): TokenStore {
  const access = new Map<string, AccessRecord>();
  const refresh = new Map<string, RefreshRecord>();
  const generations = new Map<string, number>();
  const counts = { password: 0, refresh: 0 };
  // Records are kept past expiry so the refusal can say "expired" rather than "unknown"; this grace bounds memory.
  const graceMs = Math.max(ttl.refreshSeconds, ttl.accessSeconds) * 1000;

  const prune = (): void => {
    const cutoff = clock.nowMs() - graceMs;
    for (const [token, rec] of access) if (rec.expiresAtMs < cutoff) access.delete(token);
    for (const [token, rec] of refresh) if (rec.expiresAtMs < cutoff) refresh.delete(token);
  };

  const issue = (username: string): IssuedTokens => {
    prune();
    // Whole seconds, so the RFC 3339 expiry a client reads is exactly when the token stops working.
    const nowSec = Math.floor(clock.nowMs() / 1000);
    const tokens: IssuedTokens = {
      accessToken: `sim_at_${randomBytes(24).toString('base64url')}`,
      accessExpiresAtMs: (nowSec + ttl.accessSeconds) * 1000,
      refreshToken: `sim_rt_${randomBytes(24).toString('base64url')}`,
      refreshExpiresAtMs: (nowSec + ttl.refreshSeconds) * 1000,
    };
    const generation = generations.get(username) ?? 0;
    access.set(tokens.accessToken, { username, expiresAtMs: tokens.accessExpiresAtMs, generation });
    refresh.set(tokens.refreshToken, { username, expiresAtMs: tokens.refreshExpiresAtMs, generation, rotated: false });
    return tokens;
  };

  return {
    passwordLogin(username) {
      generations.set(username, (generations.get(username) ?? 0) + 1);
      counts.password++;
      return issue(username);
    },
    refresh(token) {
      const rec = refresh.get(token);
      if (rec === undefined) return { ok: false, reason: 'unknown' };
      if (rec.rotated) return { ok: false, reason: 'rotated', username: rec.username };
      if (ttl.loginRevokesRefresh === true && rec.generation < (generations.get(rec.username) ?? 0)) {
        return { ok: false, reason: 'superseded', username: rec.username };
      }
      if (clock.nowMs() >= rec.expiresAtMs) return { ok: false, reason: 'expired', username: rec.username };
      rec.rotated = true;
      counts.refresh++;
      return { ok: true, tokens: issue(rec.username) };
    },
    checkAccess(token) {
      const rec = access.get(token);
      if (rec === undefined) return { ok: false, reason: 'unknown' };
      if (rec.generation < (generations.get(rec.username) ?? 0)) {
        return { ok: false, reason: 'superseded', username: rec.username };
      }
      if (clock.nowMs() >= rec.expiresAtMs) return { ok: false, reason: 'expired', username: rec.username };
      return { ok: true, username: rec.username };
    },
    ownerOf: (token) => access.get(token)?.username,
    refreshOwner: (token) => refresh.get(token)?.username,
    grants: () => ({ ...counts }),
  };
}
