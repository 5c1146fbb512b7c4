import { Secret } from '../config/secret.js';
import type { RefusedRecordReport } from '../state/refused-record.js';
import type { StateStore } from '../state/state-store.js';
import type { FleetLock } from './fleet-lock.js';
import { EXPIRY_MARGIN_MS, tokenFlaw, type GrantedTokens, type TokenSet } from './token-set.js';

/** Store keys of the fleet token, scoped per account (base URL + username) by the store; the lock's: fleet-lock.ts. */
export const TOKEN_RECORD_KEY = 'token:record';
export const LOGIN_COOLDOWN_KEY = 'token:login-cooldown';

/** The record outlives its refresh token by a little, so a reader still sees why it is of no use; then it goes. */
const RECORD_TTL_SLACK_MS = 60_000;
/**
 * What a record read back may claim against the gateway's clock as this replica knows it: issued at most this far
 * ahead (clocks differ a little between replicas, never by minutes), tokens living at most this long from now (spec
 * 4.1: 15 minutes and 8 hours; bounds with room for a gateway that grants longer). Past them, no sidecar wrote it.
 */
const RECORD_FUTURE_ALLOWANCE_MS = 5 * 60_000;
const MAX_ACCESS_LIFETIME_MS = 24 * 3_600_000;
const MAX_REFRESH_LIFETIME_MS = 30 * 24 * 3_600_000;

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
  /**
   * When the gateway refused this refresh token (gateway clock, ms): the replica that sent it is looking again for
   * the successor another replica may share, and whoever needs a token meanwhile does the same before logging in.
   */
  readonly refusedAtMs?: number | undefined;
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
  refusedAtMs?: number;
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
    ...(record.refusedAtMs === undefined ? {} : { refusedAtMs: record.refusedAtMs }),
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
    refusedAtMs: typeof j.refusedAtMs === 'number' && Number.isFinite(j.refusedAtMs) ? j.refusedAtMs : undefined,
  };
}

/**
 * Why a decoded record cannot be taken into use, checked against the gateway's time `nowMs`; undefined when it can.
 * With the MAC on, a forged record is refused before this (record-mac.ts); these checks hold without it too.
 */
export function recordFlaw(record: SharedTokenRecord, nowMs: number): string | undefined {
  const tokens = tokenFlaw(record.accessToken.reveal(), record.refreshToken.reveal());
  if (tokens !== undefined) return tokens;
  if (!Number.isSafeInteger(record.generation) || record.generation < 0) return 'generation is not a count';
  if (Math.max(record.loginAtMs, record.issuedAtMs) > nowMs + RECORD_FUTURE_ALLOWANCE_MS) return 'issued in the future';
  if (record.issuedAtMs < record.loginAtMs) return 'issued before its login';
  if (
    record.accessExpiresAtMs > nowMs + MAX_ACCESS_LIFETIME_MS ||
    record.refreshExpiresAtMs > nowMs + MAX_REFRESH_LIFETIME_MS
  )
    return 'lives longer than any grant';
  return undefined;
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

// Which record wins: what a replica holds against what the store holds.

/**
 * What the replica holds when it asks for a new token. `local`: got on its own while the store was away (its
 * generation means nothing to the fleet). `usable`: its access token still works (not rejected, not expiring).
 */
export interface Basis {
  readonly held: SharedTokenRecord | undefined;
  readonly local: boolean;
  readonly usable: boolean;
}

/** Whether a record's access token can still be used for a while, by the gateway's clock. */
export type AccessUsable = (record: SharedTokenRecord) => boolean;

/** A record with a usable token that replaces what the replica holds (the generation moved). */
export function superseding(
  record: SharedTokenRecord | undefined,
  basis: Basis,
  accessUsable: AccessUsable,
): SharedTokenRecord | undefined {
  if (!record || !accessUsable(record)) return undefined;
  const { held } = basis;
  if (!held) return record;
  // The same tokens under a new number (a replica re-shared them) do not help a replica whose token was refused.
  if (!basis.usable && sameTokens(record, held)) return undefined;
  // A newer generation, or newer tokens under a lower one: a Redis that came back empty starts counting again
  // from whichever replica shared its token first (rejoin).
  const moved = basis.local
    ? !issuedLater(held, record)
    : record.generation > held.generation || (!sameTokens(record, held) && issuedLater(record, held));
  return moved ? record : undefined;
}

/**
 * On rejoining the fleet, without a gateway call: the store's record to adopt, 'keep' what is held, or 'share'
 * the replica's own token (the store holds none, a dead one or an older chain).
 */
export function rejoinChoice(
  record: SharedTokenRecord | undefined,
  basis: Basis,
  accessUsable: AccessUsable,
): SharedTokenRecord | 'keep' | 'share' {
  const own = basis.usable ? basis.held : undefined;
  if (record && accessUsable(record) && (!own || !issuedLater(own, record))) {
    // Numbers alone do not say it: after Redis came back empty, a replica shares its own token under a number
    // the others may hold for an older one.
    const same =
      basis.held !== undefined &&
      !basis.local &&
      basis.held.generation === record.generation &&
      sameTokens(record, basis.held);
    return same ? 'keep' : record;
  }
  // Never the store's own tokens again: that would only bump the generation, and would drop the spent mark of a
  // holder that sent their refresh token and vanished (a replica whose clock estimate moved sees them dead first).
  return own && !sameTokens(record, own) ? 'share' : 'keep';
}

// The record on the store: reads, compare-and-set writes, adoption.

export interface FleetReporter {
  tokenLockWait(seconds: number): void;
  tokenAdopted(): void;
}

/** adopted: another replica's record; written: ours, in the store; unwritten: ours, the store would not take it. */
export interface Acquired {
  readonly record: SharedTokenRecord;
  readonly via: 'adopted' | 'written' | 'unwritten';
}

/**
 * The fleet's token record on the store: read with its exact text, written only over the text that was read
 * (compare-and-set) and announced, and another replica's record taken into use (adopted, counted).
 */
export class FleetRecords {
  /** The last record refused: reported once, not at every read while it stays. */
  private refusedRaw: string | undefined;

  constructor(
    private readonly store: StateStore,
    private readonly lock: FleetLock,
    private readonly reporter: FleetReporter,
    /** A token record read back that no sidecar could have written (recordFlaw): the store's own route. */
    private readonly refused: RefusedRecordReport,
    /** The gateway's time as this replica best knows it (ms): the record's expiries are on the gateway's clock. */
    readonly gatewayNow: () => number,
  ) {}

  /**
   * The record as stored, and as a record when it can be used. One that cannot (recordFlaw) reads as no record: a
   * login replaces it, through the lock, over its exact text.
   */
  async read(): Promise<StoredRecord> {
    const raw = await this.store.get(TOKEN_RECORD_KEY);
    const record = decodeRecord(raw);
    const flaw = record && recordFlaw(record, this.gatewayNow());
    if (flaw === undefined) return { raw, record };
    if (raw !== this.refusedRaw) {
      this.refusedRaw = raw;
      this.refused({ kind: 'token', reason: flaw, key: TOKEN_RECORD_KEY });
    }
    return { raw, record: undefined };
  }

  /** The access token can still be used for a while, by the gateway's clock (with the manager's margin). */
  accessUsable(record: SharedTokenRecord): boolean {
    return this.gatewayNow() < record.accessExpiresAtMs - EXPIRY_MARGIN_MS;
  }

  /**
   * Writes only over the record it read. When that fails, a holder whose lock expired meanwhile wrote a newer
   * record: it stands, and this replica adopts it; ours is kept for this replica alone only when theirs is dead.
   * When the key is gone, or holds tokens issued before ours, Redis lost its dataset while the grant was in flight
   * (a wipe), and a replica may have shared an older token since: ours goes over it, before the lock is released, so
   * the replicas waiting on it find it instead of making a grant of their own (the older one's refresh token is
   * spent: ours came from it, or from a login that revoked it). Tokens already granted are never lost to a store
   * that went away: they are returned unwritten.
   */
  async write(expected: string | undefined, record: SharedTokenRecord): Promise<Acquired> {
    let current: StoredRecord;
    try {
      if (await this.compareAndSet(expected, encodeRecord(record), record)) {
        await this.lock.announce(record.generation);
        return { record, via: 'written' };
      }
      current = await this.read();
      const older = current.raw === undefined || (current.record !== undefined && issuedLater(record, current.record));
      if (older && (await this.compareAndSet(current.raw, encodeRecord(record), record))) {
        await this.lock.announce(record.generation);
        return { record, via: 'written' };
      }
    } catch {
      return { record, via: 'unwritten' };
    }
    const theirs = current.record;
    if (theirs && theirs.generation >= record.generation && this.accessUsable(theirs)) {
      return this.adopted(theirs, undefined);
    }
    return { record, via: 'unwritten' };
  }

  compareAndSet(expected: string | undefined, raw: string, record: SharedTokenRecord): Promise<boolean> {
    return this.store.compareAndSet(TOKEN_RECORD_KEY, expected, raw, recordTtlMs(record, this.gatewayNow()));
  }

  adopted(record: SharedTokenRecord, waitingSince: number | undefined): Acquired {
    this.waited(waitingSince);
    this.reporter.tokenAdopted();
    return { record, via: 'adopted' };
  }

  waited(since: number | undefined): void {
    if (since !== undefined) this.reporter.tokenLockWait((performance.now() - since) / 1000);
  }
}
