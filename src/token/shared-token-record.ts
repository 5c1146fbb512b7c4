import { Secret } from '../config/secret.js';
import type { GrantedTokens, TokenSet } from './token-set.js';

/** Store keys and channel of the fleet token (the store scopes them per account: base URL + username). */
export const TOKEN_RECORD_KEY = 'token:record';
export const TOKEN_LOCK_KEY = 'token:lock';
export const LOGIN_COOLDOWN_KEY = 'token:login-cooldown';
export const TOKEN_CHANNEL = 'token:generation';

/** The record outlives its refresh token by a little, so a reader still sees why it is of no use; then it goes. */
const RECORD_TTL_SLACK_MS = 60_000;

/**
 * The fleet's one token, as every replica reads it from the store. Times are wall-clock milliseconds on the
 * gateway's clock (the RFC 3339 fields as the gateway sent them), so each replica converts them to its own
 * monotonic deadlines with its own estimate of the gateway's time: replicas whose clocks differ still agree on
 * when the token dies.
 */
export interface SharedTokenRecord {
  /** Incremented by whoever writes a new record: comparable across replicas, unlike a per-process counter. */
  readonly generation: number;
  readonly accessToken: Secret;
  readonly refreshToken: Secret;
  readonly accessExpiresAtMs: number;
  readonly refreshExpiresAtMs: number;
  /** Its refresh token was handed to the network (perhaps without an answer): never sent again; log in instead. */
  readonly refreshSpent: boolean;
  /**
   * When the password login that began this chain of refreshes was granted, and when these tokens were: a login
   * supersedes every access token issued before it (spec 4.1 rule 3), so of two chains the later login's wins.
   */
  readonly loginAtMs: number;
  readonly issuedAtMs: number;
  /**
   * The lock value of the holder that last claimed the record before calling the gateway. Claiming changes the
   * stored text, so a holder whose lock expired meanwhile can no longer write over it (compare-and-set).
   */
  readonly fence?: string | undefined;
}

/** A record as read, with the exact stored text: compare-and-set works on the raw value, not on a re-encoding. */
export interface StoredRecord {
  readonly raw: string | undefined;
  readonly record: SharedTokenRecord | undefined;
}

interface RecordJson {
  v: 1;
  generation: number;
  accessToken: string;
  refreshToken: string;
  accessExpiresAtMs: number;
  refreshExpiresAtMs: number;
  refreshSpent: boolean;
  loginAtMs: number;
  issuedAtMs: number;
  fence?: string;
}

export function encodeRecord(record: SharedTokenRecord): string {
  const json: RecordJson = {
    v: 1,
    generation: record.generation,
    accessToken: record.accessToken.reveal(),
    refreshToken: record.refreshToken.reveal(),
    accessExpiresAtMs: record.accessExpiresAtMs,
    refreshExpiresAtMs: record.refreshExpiresAtMs,
    refreshSpent: record.refreshSpent,
    loginAtMs: record.loginAtMs,
    issuedAtMs: record.issuedAtMs,
    ...(record.fence === undefined ? {} : { fence: record.fence }),
  };
  return JSON.stringify(json);
}

/** What a holder writes over an empty store before logging in: no tokens, but a stale holder's write now fails. */
export function encodeClaim(fence: string): string {
  return JSON.stringify({ v: 1, claim: fence });
}

/** undefined for anything that is not a record of this version: it is then treated as no record (and replaced). */
export function decodeRecord(raw: string | undefined): SharedTokenRecord | undefined {
  if (raw === undefined) return undefined;
  let parsed: unknown;
  try {
    parsed = JSON.parse(raw);
  } catch {
    return undefined;
  }
  if (typeof parsed !== 'object' || parsed === null) return undefined;
  const j = parsed as Partial<Record<keyof RecordJson, unknown>>;
  const numbers = [j.generation, j.accessExpiresAtMs, j.refreshExpiresAtMs, j.loginAtMs, j.issuedAtMs];
  if (j.v !== 1 || !numbers.every((n) => typeof n === 'number' && Number.isFinite(n))) return undefined;
  if (typeof j.accessToken !== 'string' || typeof j.refreshToken !== 'string' || typeof j.refreshSpent !== 'boolean')
    return undefined;
  const [generation, accessExpiresAtMs, refreshExpiresAtMs, loginAtMs, issuedAtMs] = numbers as number[];
  return {
    generation: generation ?? 0,
    accessToken: new Secret(j.accessToken),
    refreshToken: new Secret(j.refreshToken),
    accessExpiresAtMs: accessExpiresAtMs ?? 0,
    refreshExpiresAtMs: refreshExpiresAtMs ?? 0,
    refreshSpent: j.refreshSpent,
    loginAtMs: loginAtMs ?? 0,
    issuedAtMs: issuedAtMs ?? 0,
    fence: typeof j.fence === 'string' ? j.fence : undefined,
  };
}

/** A new record from the token endpoint's grant; a refresh continues its chain, a login starts one. */
export function recordFromGrant(
  tokens: GrantedTokens,
  generation: number,
  nowMs: number,
  chain: Pick<SharedTokenRecord, 'loginAtMs'> | undefined,
): SharedTokenRecord {
  return {
    generation,
    accessToken: tokens.accessToken,
    refreshToken: tokens.refreshToken,
    accessExpiresAtMs: tokens.accessExpiresAtMs,
    refreshExpiresAtMs: tokens.refreshExpiresAtMs,
    refreshSpent: false,
    loginAtMs: chain?.loginAtMs ?? nowMs,
    issuedAtMs: nowMs,
  };
}

/** True when `a` was issued after `b` in the gateway's eyes: a later login's chain, or later in the same chain. */
export function issuedLater(a: SharedTokenRecord, b: SharedTokenRecord): boolean {
  if (a.loginAtMs !== b.loginAtMs) return a.loginAtMs > b.loginAtMs;
  return a.issuedAtMs > b.issuedAtMs;
}

/** Every key has a TTL: the record goes when its refresh token is long dead. */
export function recordTtlMs(record: SharedTokenRecord, nowMs: number): number {
  return Math.max(RECORD_TTL_SLACK_MS, record.refreshExpiresAtMs - nowMs + RECORD_TTL_SLACK_MS);
}

export function sameTokens(a: SharedTokenRecord | undefined, b: SharedTokenRecord | undefined): boolean {
  return a !== undefined && b !== undefined && a.accessToken.reveal() === b.accessToken.reveal();
}

/** A record as this replica's TokenSet: deadlines on its own monotonic clock, from its estimate of gateway time. */
export function setFromRecord(
  record: SharedTokenRecord,
  localGeneration: number,
  recordGeneration: number | undefined,
  clocks: { readonly mono: number; readonly gatewayNow: number },
): TokenSet {
  return {
    generation: localGeneration,
    accessToken: record.accessToken,
    refreshToken: record.refreshToken,
    accessExpiresAtMs: record.accessExpiresAtMs,
    refreshExpiresAtMs: record.refreshExpiresAtMs,
    accessDeadline: clocks.mono + record.accessExpiresAtMs - clocks.gatewayNow,
    refreshDeadline: clocks.mono + record.refreshExpiresAtMs - clocks.gatewayNow,
    recordGeneration,
    loginAtMs: record.loginAtMs,
    issuedAtMs: record.issuedAtMs,
  };
}

/** What this replica holds, as a record (generation 0 when it was got without the store). */
export function recordFromSet(set: TokenSet, refreshSpent: boolean): SharedTokenRecord {
  return {
    generation: set.recordGeneration ?? 0,
    accessToken: set.accessToken,
    refreshToken: set.refreshToken,
    accessExpiresAtMs: set.accessExpiresAtMs,
    refreshExpiresAtMs: set.refreshExpiresAtMs,
    refreshSpent,
    loginAtMs: set.loginAtMs ?? 0,
    issuedAtMs: set.issuedAtMs ?? 0,
  };
}
