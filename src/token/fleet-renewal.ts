import type { Secret } from '../config/secret.js';
import type { Logger } from '../observability/log.js';
import type { StateStore } from '../state/state-store.js';
import type { FleetLock } from './fleet-lock.js';
import type { Basis } from './fleet-precedence.js';
import type { Acquired, FleetRecords } from './fleet-records.js';
import { grantWithin } from './grant-calls.js';
import {
  LOGIN_COOLDOWN_KEY,
  TOKEN_RECORD_KEY,
  encodeClaim,
  encodeRecord,
  recordFromGrant,
  recordTtlMs,
  sameTokens,
  type SharedTokenRecord,
  type StoredRecord,
} from './shared-token-record.js';
import { EXPIRY_MARGIN_MS, type GrantResult } from './token-set.js';

/** The two grants, as the token manager makes them (counted and logged there). */
export interface FleetGrants {
  refresh(refreshToken: Secret): Promise<GrantResult>;
  login(): Promise<GrantResult>;
}

/** The record changed between reading it and writing it: read again. */
export const MOVED = Symbol('moved');

export interface RenewalLimits {
  readonly lockTtlMs: number;
  readonly grantTimeoutMs: number;
  readonly loginCooldownMs: number;
}

/**
 * The gateway calls of the replica holding the token lock: claim the record, then refresh (or log in, behind the
 * fleet-wide cooldown) and write the result over the claim.
 */
export class FleetRenewal {
  constructor(
    private readonly store: StateStore,
    private readonly records: FleetRecords,
    private readonly lock: FleetLock,
    private readonly limits: RenewalLimits,
    private readonly log: Logger,
  ) {}

  async renew(
    lock: string,
    seen: StoredRecord,
    source: SharedTokenRecord | undefined,
    basis: Basis,
    grants: FleetGrants,
  ): Promise<Acquired | typeof MOVED> {
    const { records } = this;
    const refreshable =
      source !== undefined &&
      !source.refreshSpent &&
      records.gatewayNow() < source.refreshExpiresAtMs - EXPIRY_MARGIN_MS;
    // Claimed before the gateway is called, and the refresh token marked spent from the moment it is handed to
    // the network: whoever comes next (this replica having died or lost the lock meanwhile) never sends it again
    // and logs in instead, and a holder whose lock expired can no longer write (compare-and-set on the raw text).
    const claimed = source && { ...source, refreshSpent: source.refreshSpent || refreshable, fence: lock };
    const claimedRaw = claimed ? encodeRecord(claimed) : encodeClaim(lock);
    // A bare claim (no record yet: a login) outlives the longest login, so the login's write finds it in place.
    const { lockTtlMs, grantTimeoutMs } = this.limits;
    const ttlMs = claimed ? recordTtlMs(claimed, records.gatewayNow()) : lockTtlMs + grantTimeoutMs;
    if (!(await this.store.compareAndSet(TOKEN_RECORD_KEY, seen.raw, claimedRaw, ttlMs))) return MOVED;
    if (!claimed || !refreshable) return this.login(lock, claimedRaw, source?.generation ?? 0, grants);
    const refreshed = await this.grant(lock, grants.refresh(claimed.refreshToken));
    if (refreshed.kind === 'granted') {
      return records.write(
        claimedRaw,
        recordFromGrant(refreshed.tokens, claimed.generation + 1, records.gatewayNow(), claimed),
      );
    }
    if (refreshed.kind === 'failed' && !refreshed.sent) {
      // It never left: not spent after all. Keep the access token while it works (a login would log out every
      // replica, spec 4.1 rule 3); retry the refresh later.
      const unspent = { ...claimed, refreshSpent: false };
      const unspentRaw = encodeRecord(unspent);
      const restored = await records.compareAndSet(claimedRaw, unspentRaw, unspent);
      const stillUsable = sameTokens(claimed, basis.held) ? basis.usable : records.accessUsable(claimed);
      if (stillUsable) throw new Error(`refresh failed before sending: ${refreshed.reason}`);
      if (!restored) return MOVED;
      return this.login(lock, unspentRaw, claimed.generation, grants);
    }
    this.log.warn({ event: 'token.fallback', reason: refreshed.kind }, 'refresh failed; logging in with the password');
    return this.login(lock, claimedRaw, claimed.generation, grants);
  }

  private async login(
    lock: string,
    expected: string | undefined,
    generation: number,
    grants: FleetGrants,
  ): Promise<Acquired> {
    const { loginCooldownMs } = this.limits;
    if (!(await this.store.setIfAbsent(LOGIN_COOLDOWN_KEY, '1', loginCooldownMs))) {
      throw new Error(`another replica logged in less than ${loginCooldownMs} ms ago; not logging in again`);
    }
    const login = await this.grant(lock, grants.login());
    if (login.kind === 'granted') {
      const record = recordFromGrant(login.tokens, generation + 1, this.records.gatewayNow(), undefined);
      return this.records.write(expected, record);
    }
    throw new Error(login.kind === 'rejected' ? `login rejected (${login.status} ${login.code ?? ''})` : login.reason);
  }

  /** A grant under the lock `lock`: kept alive while in flight, counted as lost (spent) past the grant timeout. */
  private grant(lock: string, call: Promise<GrantResult>): Promise<GrantResult> {
    return this.lock.holding(lock, grantWithin(call, this.limits.grantTimeoutMs));
  }
}
