import type { Secret } from '../config/secret.js';
import type { Logger } from '../observability/log.js';
import type { ClockCorrection } from '../signing/clock-correction.js';
import { refusedRecordReport, type RefusedRecordReport } from '../state/refused-record.js';
import type { StateStore } from '../state/state-store.js';
import { FleetLock } from './fleet-lock.js';
import {
  FleetRecords,
  LOGIN_COOLDOWN_KEY,
  TOKEN_RECORD_KEY,
  encodeClaim,
  encodeRecord,
  issuedLater,
  recordFromGrant,
  recordTtlMs,
  rejoinChoice,
  sameTokens,
  superseding,
  type Acquired,
  type Basis,
  type FleetReporter,
  type SharedTokenRecord,
  type StoredRecord,
} from './fleet-record.js';
import { grantWithin } from './grant-calls.js';
import { decideGrant, loginError, sendRefresh, type HeldState, type SpentMark } from './grant-decision.js';
import { EXPIRY_MARGIN_MS, type GrantResult } from './token-set.js';

/**
 * A grant without an answer by then counts as sent without an answer (spent). The least it can be; fleetTokenFor
 * makes it the token call's own HTTP bound (waiting for a connection, then the answer) plus a margin, so a slow
 * token endpoint that does answer is never taken for a lost one.
 */
export const DEFAULT_GRANT_TIMEOUT_MS = 10_000;
/** rejoin's answer when another replica holds the token lock. */
export const LOCK_TAKEN = Symbol('token lock taken');
/**
 * The token lock's lifetime. Its holder pushes it out while its grant is in flight (FleetLock.holding), so a grant
 * may take longer; a holder that dies or stalls loses it within this time, and the others go on without it.
 */
export const DEFAULT_LOCK_TTL_MS = 30_000;
/** At most one password login per this interval in the whole fleet (a login logs every replica out). */
export const DEFAULT_LOGIN_COOLDOWN_MS = 5_000;
/** How often a replica waiting for the lock holder re-reads the record when no publication came. */
const DEFAULT_POLL_MS = 200;
/** The record changed between reading it and writing it: read again. */
const MOVED = Symbol('moved');
/** The gateway refused the record's refresh token: look again at the record before logging in. */
const REFUSED = Symbol('refused');
/**
 * How long a replica whose refresh was refused waits for the fleet's record to bring the successor before it logs
 * in: the one that rotated the refresh token shares its new token as soon as its store is back, at most one
 * reconnect delay (REDIS_RECONNECT_MAX_MS, 1 s) after the others', then one read and one write; with room for a
 * loaded host. Requests wait for it (well within the token wait).
 */
export const DEFAULT_LOOK_AGAIN_MS = 3_000;
/**
 * How long the store must stay away before a replica logs in alone, which would revoke every other replica's token:
 * a restart's few seconds and one reconnect delay. A replica whose lone refresh was refused waits this long for the
 * store; one that needs a login waits for the store until it has been away this long (since the replica started, if
 * it never answered). With the look at the record after it, within the 10 s a request waits for a token.
 */
export const DEFAULT_STORE_BACK_WAIT_MS = 5_000;
/**
 * How long a replica's first token waits for a store still making its first connection (neither an answer nor a
 * failure yet, past the start's own wait, FIRST_CONNECT_WAIT_MS) before it logs in alone. Replicas started together
 * on slow Sentinels would otherwise each log in, and on a gateway where a login revokes earlier tokens log each
 * other's callers out. A store that failed is waited for as any store away (DEFAULT_STORE_BACK_WAIT_MS); a
 * connection that neither answers nor fails this long is taken for a hung one. Requests meanwhile get 503
 * token.unavailable (retryable) after their token wait.
 */
export const DEFAULT_FIRST_CONNECT_WAIT_MS = 30_000;

/** The two grants, as the replica makes them (counted and logged there). */
export interface FleetGrants {
  refresh(refreshToken: Secret): Promise<GrantResult>;
  login(): Promise<GrantResult>;
  /** The replica's own spent mark for `refreshToken`: it may be the one the replica holds (then spent there too). */
  heldMark(refreshToken: Secret): SpentMark;
}

export interface FleetTokenOptions {
  readonly lockTtlMs?: number;
  readonly grantTimeoutMs?: number;
  readonly loginCooldownMs?: number;
  readonly pollMs?: number;
  readonly lookAgainMs?: number;
  readonly storeBackWaitMs?: number;
  readonly firstConnectWaitMs?: number;
  /** The gateway's time as this replica best knows it (ms): the record's expiries are on the gateway's clock. */
  readonly gatewayNow?: () => number;
  /** Tells when Redis lost its dataset (store-epoch.ts): the lock and the record are gone. */
  readonly wipes?: WipeNotices | undefined;
  /**
   * A token record refused for what no sidecar writes: the store's own route for refused records (counted and
   * logged, state/refused-record.ts). Default: logged only.
   */
  readonly recordRefused?: RefusedRecordReport;
}

/** Who tells of a wipe of the store (the store's epoch). */
export interface WipeNotices {
  onWipe(listener: () => void): void;
}

/**
 * One token for every replica of the account (docs/fleet.md). Whoever needs a new token first takes the lock, reads
 * the record again and adopts it if another replica already replaced the token; otherwise it refreshes (or logs
 * in, behind a fleet-wide cooldown), writes the result only if the record is still the one it read, and announces
 * the new generation. The others wait for the announcement instead of calling the gateway. Every store call may
 * throw StateStoreUnavailableError: the replica then falls back to its own tokens (fleet-source.ts). This file is
 * the lock loop, the gateway calls under the lock, and sharing; the record, which one wins and its compare-and-set
 * writes are fleet-record.ts.
 */
export class FleetToken {
  private readonly lock: FleetLock;
  private readonly records: FleetRecords;
  private readonly wipes: WipeNotices | undefined;
  private readonly lockTtlMs: number;
  private readonly grantTimeoutMs: number;
  /** At most one password login per this interval in the whole fleet (a replica alone keeps it for itself). */
  readonly loginCooldownMs: number;
  /** A refresh refused: how long the record is read again for a newer token before a login (DEFAULT_LOOK_AGAIN_MS). */
  readonly lookAgainMs: number;
  /** How long the store must stay away before a login alone (DEFAULT_STORE_BACK_WAIT_MS). */
  readonly storeBackWaitMs: number;
  /** The first token, the store still connecting: how long to wait for it (DEFAULT_FIRST_CONNECT_WAIT_MS). */
  readonly firstConnectWaitMs: number;
  private stopped = false;
  readonly gatewayNow: () => number;
  private readonly accessUsable = (record: SharedTokenRecord): boolean => this.records.accessUsable(record);

  constructor(
    readonly store: StateStore,
    reporter: FleetReporter,
    private readonly log: Logger,
    options: FleetTokenOptions = {},
  ) {
    this.lockTtlMs = options.lockTtlMs ?? DEFAULT_LOCK_TTL_MS;
    this.grantTimeoutMs = options.grantTimeoutMs ?? DEFAULT_GRANT_TIMEOUT_MS;
    this.loginCooldownMs = options.loginCooldownMs ?? DEFAULT_LOGIN_COOLDOWN_MS;
    this.lookAgainMs = options.lookAgainMs ?? DEFAULT_LOOK_AGAIN_MS;
    this.storeBackWaitMs = options.storeBackWaitMs ?? DEFAULT_STORE_BACK_WAIT_MS;
    this.firstConnectWaitMs = options.firstConnectWaitMs ?? DEFAULT_FIRST_CONNECT_WAIT_MS;
    this.gatewayNow = options.gatewayNow ?? Date.now;
    this.lock = new FleetLock(store, this.lockTtlMs, options.pollMs ?? DEFAULT_POLL_MS);
    const refused = options.recordRefused ?? refusedRecordReport(undefined, log);
    this.records = new FleetRecords(store, this.lock, reporter, refused, this.gatewayNow);
    this.wipes = options.wipes;
    // First of all: a grant in flight under our lock must not meet a second one from a replica that found no lock.
    this.wipes?.onWipe(() => void this.lock.reassert());
  }

  /** Calls `listener` after each wipe of the store (nothing when wipes are not watched). */
  onWipe(listener: () => void): void {
    this.wipes?.onWipe(listener);
  }

  /** Calls `listener` with every generation a replica announces; returns how to stop. */
  listen(listener: (generation: number) => void): () => void {
    return this.lock.listen(listener);
  }

  subscribe(): Promise<void> {
    return this.lock.subscribe();
  }

  stop(): void {
    this.stopped = true;
    this.lock.stop();
  }

  /**
   * A new token for the fleet: adopted, or fetched under the lock. `lookAgainUntil` (performance.now() ms): a refresh
   * of this replica's was refused, so until then only a newer record is taken, no grant made (lookAgainMs).
   */
  async acquire(basis: Basis, grants: FleetGrants, lookAgainUntil?: number): Promise<Acquired> {
    const { records } = this;
    const giveUpAt = performance.now() + this.lockTtlMs + this.grantTimeoutMs + this.lookAgainMs;
    let waitingSince: number | undefined;
    let lookingUntil = lookAgainUntil;
    for (;;) {
      if (this.stopped) throw new Error('stopped');
      const seen = await records.read();
      const newer = superseding(seen.record, basis, this.accessUsable);
      if (newer) return records.adopted(newer, waitingSince);
      if (lookingUntil !== undefined && performance.now() < lookingUntil) {
        await this.lock.news(seen.record?.generation ?? 0);
        continue;
      }
      const lock = await this.lock.take();
      if (lock !== undefined) {
        records.waited(waitingSince);
        waitingSince = undefined;
        const got = await this.underLock(lock, basis, grants, lookingUntil === undefined);
        if (got === REFUSED) {
          this.log.info(
            { event: 'token.looking_again', withinMs: this.lookAgainMs },
            "the fleet's refresh token was refused; waiting for the record to bring a newer token before a login",
          );
          lookingUntil = performance.now() + this.lookAgainMs;
          continue;
        }
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
   * if the store holds none, a dead one or an older chain (rejoinChoice in fleet-record.ts). Sharing takes the lock,
   * so it never writes over the record of a holder at work (that holder's news follows). Never calls the gateway, so
   * replicas returning together cause no login storm. undefined: keep what is held. LOCK_TAKEN: ours is to be
   * shared but another replica holds the lock (sharing its own, most often): try again shortly, when its record
   * can be compared.
   */
  async rejoin(basis: Basis): Promise<Acquired | undefined | typeof LOCK_TAKEN> {
    const first = this.rejoining(await this.records.read(), basis);
    if (first !== 'share') return first;
    const lock = await this.lock.take();
    if (lock === undefined) return LOCK_TAKEN;
    try {
      const seen = await this.records.read();
      const decided = this.rejoining(seen, basis);
      if (decided !== 'share' || !basis.held) return decided === 'share' ? undefined : decided;
      const generation = Math.max(seen.record?.generation ?? 0, basis.local ? 0 : basis.held.generation) + 1;
      this.log.info({ event: 'token.shared', generation }, "shared this replica's token with the fleet");
      return await this.records.write(seen.raw, { ...basis.held, generation, fence: undefined });
    } finally {
      await this.lock.release(lock);
    }
  }

  private rejoining({ record }: StoredRecord, basis: Basis): Acquired | undefined | 'share' {
    const choice = rejoinChoice(record, basis, this.accessUsable);
    if (choice === 'share') return 'share';
    return choice === 'keep' ? undefined : this.records.adopted(choice, undefined);
  }

  private async underLock(
    lock: string,
    basis: Basis,
    grants: FleetGrants,
    mayLookAgain: boolean,
  ): Promise<Acquired | typeof MOVED | typeof REFUSED> {
    try {
      const seen = await this.records.read();
      const newer = superseding(seen.record, basis, this.accessUsable);
      if (newer) return this.records.adopted(newer, undefined);
      // Stopped (shutdown) before claiming: the gateway is not called for a pod on its way out.
      if (this.stopped) throw new Error('stopped');
      // Our own token is the one to go on from when the store holds none (a Redis that came back empty: its refresh
      // token, not a password login, which would log out every other replica, spec 4.1 rule 3), or an older one
      // (ours was got while the store was away, or another replica shared an older token after a wipe: the older
      // one's refresh token was spent to get ours).
      const { held } = basis;
      const ownIsNewer = held && (!seen.record || issuedLater(held, seen.record));
      const generation = (seen.record?.generation ?? (basis.local ? 0 : (held?.generation ?? 0))) + 1;
      if (held && !seen.record && !basis.local && basis.usable) {
        // The fleet's record is gone (Redis lost it) and ours still works: shared, not refreshed now. A holder
        // whose refresh was at the gateway when the record went (its claim, the spent mark, gone with it) writes
        // its newer token over this one meanwhile; refreshing now would send the refresh token it just spent.
        this.log.info({ event: 'token.shared', generation }, "shared this replica's token with the fleet");
        return await this.records.write(seen.raw, { ...held, generation, fence: undefined });
      }
      // The record may still call unspent a refresh token this replica sent alone (refused while the store was
      // away): it is never sent again.
      const spentHere = held?.refreshSpent === true && sameTokens(held, seen.record);
      const stored = seen.record && spentHere ? { ...seen.record, refreshSpent: true } : seen.record;
      const source = ownIsNewer ? { ...held, generation } : stored;
      return await this.renew(lock, seen, source, basis, grants, mayLookAgain);
    } finally {
      await this.lock.release(lock);
    }
  }

  /**
   * Under the lock: claim the record, then refresh (or log in, behind the fleet-wide cooldown) and write the result
   * over the claim. The claim changes the stored text, so a holder whose lock expired can no longer write
   * (compare-and-set on the raw text); a refresh's claim also marks its refresh token spent, so whoever comes next
   * (this replica having died or lost the lock meanwhile) never sends it again and logs in instead.
   */
  private async renew(
    lock: string,
    seen: StoredRecord,
    source: SharedTokenRecord | undefined,
    basis: Basis,
    grants: FleetGrants,
    mayLookAgain: boolean,
  ): Promise<Acquired | typeof MOVED | typeof REFUSED> {
    const { records } = this;
    const state = this.state(source, mayLookAgain);
    const decision = decideGrant(state, 'renew');
    // Another replica's refresh of this token was refused a moment ago: its successor may be on its way.
    if (decision === 'look-again') return REFUSED;
    if (!source || decision !== 'refresh') {
      const claimed = source && { ...source, fence: lock };
      const claimedRaw = claimed ? encodeRecord(claimed) : encodeClaim(lock);
      // A bare claim (no record yet: a login) outlives the longest login, so the login's write finds it in place.
      const ttlMs = claimed ? recordTtlMs(claimed, this.gatewayNow()) : this.lockTtlMs + this.grantTimeoutMs;
      if (!(await this.store.compareAndSet(TOKEN_RECORD_KEY, seen.raw, claimedRaw, ttlMs))) return MOVED;
      return this.login(lock, claimedRaw, source?.generation ?? 0, grants);
    }
    const claimed = { ...source, refreshSpent: true, fence: lock };
    const claimedRaw = encodeRecord(claimed);
    const unspent = { ...claimed, refreshSpent: false };
    const unspentRaw = encodeRecord(unspent);
    const held = grants.heldMark(claimed.refreshToken);
    const attempt = await sendRefresh(
      {
        mark: async () => {
          const ttlMs = recordTtlMs(claimed, this.gatewayNow());
          if (!(await this.store.compareAndSet(TOKEN_RECORD_KEY, seen.raw, claimedRaw, ttlMs))) return false;
          return held.mark();
        },
        unmark: async () => (await held.unmark()) && records.compareAndSet(claimedRaw, unspentRaw, unspent),
      },
      () => this.grant(lock, grants.refresh(claimed.refreshToken)),
    );
    if (!attempt) return MOVED;
    const { result } = attempt;
    if (result.kind === 'granted') {
      return records.write(
        claimedRaw,
        recordFromGrant(result.tokens, claimed.generation + 1, this.gatewayNow(), claimed),
      );
    }
    if (result.kind === 'failed' && !result.sent) {
      // It never left: not spent after all. Keep the access token while it works (a login would log out every
      // replica, spec 4.1 rule 3); retry the refresh later.
      const accessUsable = sameTokens(claimed, basis.held) ? basis.usable : records.accessUsable(claimed);
      if (decideGrant({ ...state, accessUsable }, 'refresh-unsent') === 'keep') {
        throw new Error(`refresh failed before sending: ${result.reason}`);
      }
      if (!attempt.unmarked) return MOVED;
      return this.login(lock, unspentRaw, claimed.generation, grants);
    }
    if (result.kind === 'rejected') {
      const refused = { ...state, refresh: 'spent' as const, successorMayBeShared: mayLookAgain };
      if (decideGrant(refused, 'refresh-refused') === 'look-again') {
        // Said on the record, so that a replica needing a token meanwhile looks again too instead of logging in.
        const marked = encodeRecord({ ...claimed, refusedAtMs: this.gatewayNow() });
        const ttlMs = recordTtlMs(claimed, this.gatewayNow());
        await this.store.compareAndSet(TOKEN_RECORD_KEY, claimedRaw, marked, ttlMs).catch(() => false);
        return REFUSED;
      }
    }
    this.log.warn({ event: 'token.fallback', reason: result.kind }, 'refresh failed; logging in with the password');
    return this.login(lock, claimedRaw, claimed.generation, grants);
  }

  /**
   * The record as grant-decision.ts sees it, by the gateway's clock. The fleet's cooldown is taken at login.
   * `mayLookAgain`: this replica has not looked again for a successor yet in this acquisition.
   */
  private state(record: SharedTokenRecord | undefined, mayLookAgain: boolean): HeldState {
    const refresh = !record
      ? 'none'
      : record.refreshSpent
        ? 'spent'
        : this.gatewayNow() < record.refreshExpiresAtMs - EXPIRY_MARGIN_MS
          ? 'alive'
          : 'expired';
    const refusedAt = record?.refusedAtMs;
    const refusedLately = refusedAt !== undefined && this.gatewayNow() < refusedAt + this.lookAgainMs;
    return {
      accessUsable: record !== undefined && this.accessUsable(record),
      refresh,
      loginCoolingDown: false,
      successorMayBeShared: mayLookAgain && refusedLately,
    };
  }

  private async login(
    lock: string,
    expected: string | undefined,
    generation: number,
    grants: FleetGrants,
  ): Promise<Acquired> {
    // The fleet-wide cooldown is a key set only when absent: checked and started in one step, so two replicas
    // never both find it free (grant-decision.ts's wait). One without an expiry, or longer than the setting, was
    // written by no replica (it would hold logins off for ever): taken as absent.
    const { loginCooldownMs } = this;
    if (!(await this.store.setIfAbsent(LOGIN_COOLDOWN_KEY, '1', loginCooldownMs, { bounded: true }))) {
      throw new Error(`another replica logged in less than ${loginCooldownMs} ms ago; not logging in again`);
    }
    const login = await this.grant(lock, grants.login());
    if (login.kind === 'granted') {
      const record = recordFromGrant(login.tokens, generation + 1, this.gatewayNow(), undefined);
      return this.records.write(expected, record);
    }
    throw loginError(login);
  }

  /** A grant under the lock `lock`: kept alive while in flight, counted as lost (spent) past the grant timeout. */
  private grant(lock: string, call: Promise<GrantResult>): Promise<GrantResult> {
    return this.lock.holding(lock, grantWithin(call, this.grantTimeoutMs));
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
  upstream: {
    readonly connectTimeoutMs: number;
    readonly responseTimeoutMs: number;
    readonly now: () => number;
    readonly wipes?: WipeNotices | undefined;
    readonly recordRefused: RefusedRecordReport;
  },
): FleetToken | undefined {
  if (store.kind !== 'redis') return undefined;
  const { now } = upstream;
  // A token endpoint slower than the rest must not turn every grant into a lost one (spent, then a login).
  const httpBoundMs = upstream.connectTimeoutMs + upstream.responseTimeoutMs;
  return new FleetToken(store, reporter, log, {
    grantTimeoutMs: Math.max(DEFAULT_GRANT_TIMEOUT_MS, httpBoundMs + 5_000),
    gatewayNow: () => Math.max(now(), clock.timestampMs(now())),
    wipes: upstream.wipes,
    recordRefused: upstream.recordRefused,
  });
}
