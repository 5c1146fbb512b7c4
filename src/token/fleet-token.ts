import type { Secret } from '../config/secret.js';
import type { Logger } from '../observability/log.js';
import type { ClockCorrection } from '../signing/clock-correction.js';
import type { StateStore } from '../state/state-store.js';
import { FleetLock } from './fleet-lock.js';
import { grantWithin } from './grant-calls.js';
import {
  LOGIN_COOLDOWN_KEY,
  TOKEN_RECORD_KEY,
  decodeRecord,
  encodeClaim,
  encodeRecord,
  issuedLater,
  recordFromGrant,
  recordTtlMs,
  sameTokens,
  type SharedTokenRecord,
  type StoredRecord,
} from './shared-token-record.js';
import type { GrantResult } from './token-set.js';

/**
 * A grant without an answer by then counts as sent without an answer (spent). Longer than a wait for a free
 * connection plus connecting (SIDECAR_UPSTREAM_CONNECT_TIMEOUT_MS, 5 s by default), which end as "not sent"
 * by themselves; a token endpoint that takes longer than the rest to answer is treated as having lost it.
 */
export const DEFAULT_GRANT_TIMEOUT_MS = 10_000;
/** rejoin's answer when another replica holds the token lock. */
export const LOCK_TAKEN = Symbol('token lock taken');
/** The longest a refresh or login may hold the lock (a holder that stalls longer loses it): well over a grant. */
export const DEFAULT_LOCK_TTL_MS = 3 * DEFAULT_GRANT_TIMEOUT_MS;
/** At most one password login per this interval in the whole fleet (a login logs every replica out). */
export const DEFAULT_LOGIN_COOLDOWN_MS = 5_000;
/** How often a replica waiting for the lock holder re-reads the record when no publication came. */
const DEFAULT_POLL_MS = 200;
/** A token this close to expiry is no longer worth adopting or refreshing with (the manager's EXPIRY_MARGIN). */
const MARGIN_MS = 2_000;

export interface FleetTokenOptions {
  readonly lockTtlMs?: number;
  readonly grantTimeoutMs?: number;
  readonly loginCooldownMs?: number;
  readonly pollMs?: number;
  /** The gateway's time as this replica best knows it (ms): the record's expiries are on the gateway's clock. */
  readonly gatewayNow?: () => number;
}

/** The two grants, as the token manager makes them (counted and logged there). */
export interface FleetGrants {
  refresh(refreshToken: Secret): Promise<GrantResult>;
  login(): Promise<GrantResult>;
}

export interface FleetReporter {
  tokenLockWait(seconds: number): void;
  tokenAdopted(): void;
}

/**
 * What the replica holds when it asks for a new token. `local`: got on its own while the store was away (its
 * generation means nothing to the fleet). `usable`: its access token still works (not rejected, not expiring).
 */
export interface Basis {
  readonly held: SharedTokenRecord | undefined;
  readonly local: boolean;
  readonly usable: boolean;
}

/** adopted: another replica's record; written: ours, in the store; unwritten: ours, the store would not take it. */
export interface Acquired {
  readonly record: SharedTokenRecord;
  readonly via: 'adopted' | 'written' | 'unwritten';
}

/** The record changed between reading it and writing it: read again. */
const MOVED = Symbol('moved');

/**
 * One token for every replica of the account (issue 16). Whoever needs a new token first takes the lock, reads
 * the record again and adopts it if another replica already replaced the token; otherwise it refreshes (or logs
 * in, behind a fleet-wide cooldown), writes the result only if the record is still the one it read, and announces
 * the new generation. The others wait for the announcement instead of calling the gateway. Every store call may
 * throw StateStoreUnavailableError: the token manager then falls back to its own tokens.
 */
export class FleetToken {
  private readonly lock: FleetLock;
  private readonly lockTtlMs: number;
  private readonly grantTimeoutMs: number;
  /** At most one password login per this interval in the whole fleet (a replica alone keeps it for itself). */
  readonly loginCooldownMs: number;
  private stopped = false;
  readonly gatewayNow: () => number;

  constructor(
    readonly store: StateStore,
    private readonly reporter: FleetReporter,
    private readonly log: Logger,
    options: FleetTokenOptions = {},
  ) {
    this.lockTtlMs = options.lockTtlMs ?? DEFAULT_LOCK_TTL_MS;
    this.grantTimeoutMs = options.grantTimeoutMs ?? DEFAULT_GRANT_TIMEOUT_MS;
    this.loginCooldownMs = options.loginCooldownMs ?? DEFAULT_LOGIN_COOLDOWN_MS;
    this.gatewayNow = options.gatewayNow ?? Date.now;
    this.lock = new FleetLock(store, this.lockTtlMs, options.pollMs ?? DEFAULT_POLL_MS, (g) => this.onNews(g));
  }

  /** Set by the token manager: a replica announced `generation`. */
  onNews: (generation: number) => void = () => undefined;

  subscribe(): Promise<void> {
    return this.lock.subscribe();
  }

  stop(): void {
    this.stopped = true;
    this.lock.stop();
  }

  async read(): Promise<StoredRecord> {
    const raw = await this.store.get(TOKEN_RECORD_KEY);
    return { raw, record: decodeRecord(raw) };
  }

  /** The access token can still be used for a while, by the gateway's clock. */
  accessUsable(record: SharedTokenRecord): boolean {
    return this.gatewayNow() < record.accessExpiresAtMs - MARGIN_MS;
  }

  /** A new token for the fleet: adopted, or fetched under the lock. */
  async acquire(basis: Basis, grants: FleetGrants): Promise<Acquired> {
    const giveUpAt = performance.now() + this.lockTtlMs + this.grantTimeoutMs;
    let waitingSince: number | undefined;
    for (;;) {
      if (this.stopped) throw new Error('stopped');
      const seen = await this.read();
      const newer = this.superseding(seen.record, basis);
      if (newer) return this.adopted(newer, waitingSince);
      const lock = await this.lock.take();
      if (lock !== undefined) {
        this.waited(waitingSince);
        waitingSince = undefined;
        const got = await this.underLock(lock, basis, grants);
        if (got !== MOVED) return got;
      } else {
        waitingSince ??= performance.now();
        await this.lock.news(seen.record?.generation ?? 0);
      }
      if (performance.now() >= giveUpAt) throw new Error('no token from the fleet: the token lock stayed taken');
    }
  }

  /**
   * The store is back (or news came): adopt the fleet's token if it is valid and not older than ours; share ours
   * if the store holds none, a dead one or an older chain. Sharing takes the lock, so it never writes over the
   * record of a holder at work (that holder's news follows). Never calls the gateway, so replicas returning
   * together cause no login storm. undefined: keep what is held. LOCK_TAKEN: ours is to be shared but another
   * replica holds the lock (sharing its own, most often): try again shortly, when its record can be compared.
   */
  async rejoin(basis: Basis): Promise<Acquired | undefined | typeof LOCK_TAKEN> {
    const first = this.rejoining(await this.read(), basis);
    if (first !== 'share') return first;
    const lock = await this.lock.take();
    if (lock === undefined) return LOCK_TAKEN;
    try {
      const seen = await this.read();
      const decided = this.rejoining(seen, basis);
      if (decided !== 'share' || !basis.held) return decided === 'share' ? undefined : decided;
      const generation = Math.max(seen.record?.generation ?? 0, basis.local ? 0 : basis.held.generation) + 1;
      this.log.info({ event: 'token.shared', generation }, "shared this replica's token with the fleet");
      return await this.write(seen.raw, { ...basis.held, generation, fence: undefined });
    } finally {
      await this.lock.release(lock);
    }
  }

  private rejoining({ record }: StoredRecord, basis: Basis): Acquired | undefined | 'share' {
    const own = basis.usable ? basis.held : undefined;
    if (record && this.accessUsable(record) && (!own || !issuedLater(own, record))) {
      // Numbers alone do not say it: after Redis came back empty, a replica shares its own token under a number
      // the others may hold for an older one.
      const same =
        basis.held !== undefined &&
        !basis.local &&
        basis.held.generation === record.generation &&
        sameTokens(record, basis.held);
      return same ? undefined : this.adopted(record, undefined);
    }
    // Never the store's own tokens again: that would only bump the generation, and would drop the spent mark of a
    // holder that sent their refresh token and vanished (a replica whose clock estimate moved sees them dead first).
    return own && !sameTokens(record, own) ? 'share' : undefined;
  }

  /** A record with a usable token that replaces what the replica holds (the generation moved). */
  private superseding(record: SharedTokenRecord | undefined, basis: Basis): SharedTokenRecord | undefined {
    if (!record || !this.accessUsable(record)) return undefined;
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

  private async underLock(lock: string, basis: Basis, grants: FleetGrants): Promise<Acquired | typeof MOVED> {
    try {
      const seen = await this.read();
      const newer = this.superseding(seen.record, basis);
      if (newer) return this.adopted(newer, undefined);
      // Stopped (shutdown) before claiming: the gateway is not called for a pod on its way out.
      if (this.stopped) throw new Error('stopped');
      // Our own token (got while the store was away) is newer than the store's: it is the one to go on from.
      const { held } = basis;
      const ownIsNewer = held && basis.local && (!seen.record || issuedLater(held, seen.record));
      const source = ownIsNewer ? { ...held, generation: (seen.record?.generation ?? 0) + 1 } : seen.record;
      return await this.renew(lock, seen, source, basis, grants);
    } finally {
      await this.lock.release(lock);
    }
  }

  private async renew(
    lock: string,
    seen: StoredRecord,
    source: SharedTokenRecord | undefined,
    basis: Basis,
    grants: FleetGrants,
  ): Promise<Acquired | typeof MOVED> {
    const refreshable =
      source !== undefined && !source.refreshSpent && this.gatewayNow() < source.refreshExpiresAtMs - MARGIN_MS;
    // Claimed before the gateway is called, and the refresh token marked spent from the moment it is handed to
    // the network: whoever comes next (this replica having died or lost the lock meanwhile) never sends it again
    // and logs in instead, and a holder whose lock expired can no longer write (compare-and-set on the raw text).
    const claimed = source && { ...source, refreshSpent: source.refreshSpent || refreshable, fence: lock };
    const claimedRaw = claimed ? encodeRecord(claimed) : encodeClaim(lock);
    const ttlMs = claimed ? recordTtlMs(claimed, this.gatewayNow()) : this.lockTtlMs;
    if (!(await this.store.compareAndSet(TOKEN_RECORD_KEY, seen.raw, claimedRaw, ttlMs))) return MOVED;
    if (!claimed || !refreshable) return this.login(claimedRaw, source?.generation ?? 0, grants);
    const refreshed = await grantWithin(grants.refresh(claimed.refreshToken), this.grantTimeoutMs);
    if (refreshed.kind === 'granted') {
      return this.write(
        claimedRaw,
        recordFromGrant(refreshed.tokens, claimed.generation + 1, this.gatewayNow(), claimed),
      );
    }
    if (refreshed.kind === 'failed' && !refreshed.sent) {
      // It never left: not spent after all. Keep the access token while it works (a login would log out every
      // replica, spec 4.1 rule 3); retry the refresh later.
      const unspent = { ...claimed, refreshSpent: false };
      const unspentRaw = encodeRecord(unspent);
      const restored = await this.compareAndSet(claimedRaw, unspentRaw, unspent);
      const stillUsable = sameTokens(claimed, basis.held) ? basis.usable : this.accessUsable(claimed);
      if (stillUsable) throw new Error(`refresh failed before sending: ${refreshed.reason}`);
      if (!restored) return MOVED;
      return this.login(unspentRaw, claimed.generation, grants);
    }
    this.log.warn({ event: 'token.fallback', reason: refreshed.kind }, 'refresh failed; logging in with the password');
    return this.login(claimedRaw, claimed.generation, grants);
  }

  private async login(expected: string | undefined, generation: number, grants: FleetGrants): Promise<Acquired> {
    if (!(await this.store.setIfAbsent(LOGIN_COOLDOWN_KEY, '1', this.loginCooldownMs))) {
      throw new Error(`another replica logged in less than ${this.loginCooldownMs} ms ago; not logging in again`);
    }
    const login = await grantWithin(grants.login(), this.grantTimeoutMs);
    if (login.kind === 'granted') {
      return this.write(expected, recordFromGrant(login.tokens, generation + 1, this.gatewayNow(), undefined));
    }
    throw new Error(login.kind === 'rejected' ? `login rejected (${login.status} ${login.code ?? ''})` : login.reason);
  }

  /**
   * Writes only over the record it read. When that fails, a holder whose lock expired meanwhile wrote a newer
   * record: it stands, and this replica adopts it; ours is kept for this replica alone only when theirs is dead.
   * Tokens already granted are never lost to a store that went away: they are returned unwritten.
   */
  private async write(expected: string | undefined, record: SharedTokenRecord): Promise<Acquired> {
    let current: StoredRecord;
    try {
      if (await this.compareAndSet(expected, encodeRecord(record), record)) {
        await this.lock.announce(record.generation);
        return { record, via: 'written' };
      }
      current = await this.read();
    } catch {
      return { record, via: 'unwritten' };
    }
    const theirs = current.record;
    if (theirs && theirs.generation >= record.generation && this.accessUsable(theirs)) {
      return this.adopted(theirs, undefined);
    }
    return { record, via: 'unwritten' };
  }

  private compareAndSet(expected: string | undefined, raw: string, record: SharedTokenRecord): Promise<boolean> {
    return this.store.compareAndSet(TOKEN_RECORD_KEY, expected, raw, recordTtlMs(record, this.gatewayNow()));
  }

  private adopted(record: SharedTokenRecord, waitingSince: number | undefined): Acquired {
    this.waited(waitingSince);
    this.reporter.tokenAdopted();
    return { record, via: 'adopted' };
  }

  private waited(since: number | undefined): void {
    if (since !== undefined) this.reporter.tokenLockWait((performance.now() - since) / 1000);
  }
}

/**
 * Fleet mode when the store is shared (Redis); undefined for the memory store, where the pod keeps its own token
 * exactly as before. The gateway's time is the local clock moved by the measured offset when the gateway is ahead
 * (the same rule as the token client's), so a replica whose clock runs behind does not hold a token too long.
 */
export function fleetTokenFor(
  store: StateStore,
  clock: Pick<ClockCorrection, 'timestampMs'>,
  reporter: FleetReporter,
  log: Logger,
  upstream: { readonly connectTimeoutMs: number; readonly now: () => number },
): FleetToken | undefined {
  if (store.kind !== 'redis') return undefined;
  const { now } = upstream;
  // A slower connect setting must not turn a grant still waiting for its connection into a "lost" one.
  const grantTimeoutMs = Math.max(DEFAULT_GRANT_TIMEOUT_MS, upstream.connectTimeoutMs + 5_000);
  return new FleetToken(store, reporter, log, {
    grantTimeoutMs,
    lockTtlMs: 3 * grantTimeoutMs,
    gatewayNow: () => Math.max(now(), clock.timestampMs(now())),
  });
}
