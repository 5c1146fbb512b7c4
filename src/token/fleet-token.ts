import type { Logger } from '../observability/log.js';
import type { ClockCorrection } from '../signing/clock-correction.js';
import type { StateStore } from '../state/state-store.js';
import { FleetLock } from './fleet-lock.js';
import { rejoinChoice, superseding, type Basis } from './fleet-precedence.js';
import { FleetRecords, type Acquired, type FleetReporter } from './fleet-records.js';
import { FleetRenewal, MOVED, type FleetGrants } from './fleet-renewal.js';
import { issuedLater, type SharedTokenRecord, type StoredRecord } from './shared-token-record.js';

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

export interface FleetTokenOptions {
  readonly lockTtlMs?: number;
  readonly grantTimeoutMs?: number;
  readonly loginCooldownMs?: number;
  readonly pollMs?: number;
  /** The gateway's time as this replica best knows it (ms): the record's expiries are on the gateway's clock. */
  readonly gatewayNow?: () => number;
}

/**
 * One token for every replica of the account (issue 16). Whoever needs a new token first takes the lock, reads
 * the record again and adopts it if another replica already replaced the token; otherwise it refreshes (or logs
 * in, behind a fleet-wide cooldown), writes the result only if the record is still the one it read, and announces
 * the new generation. The others wait for the announcement instead of calling the gateway. Every store call may
 * throw StateStoreUnavailableError: the token manager then falls back to its own tokens. This file is the lock
 * loop and sharing; which record wins is fleet-precedence.ts, the record's reads and writes fleet-records.ts, the
 * gateway calls under the lock fleet-renewal.ts.
 */
export class FleetToken {
  private readonly lock: FleetLock;
  private readonly records: FleetRecords;
  private readonly renewal: FleetRenewal;
  private readonly lockTtlMs: number;
  private readonly grantTimeoutMs: number;
  /** At most one password login per this interval in the whole fleet (a replica alone keeps it for itself). */
  readonly loginCooldownMs: number;
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
    this.gatewayNow = options.gatewayNow ?? Date.now;
    this.lock = new FleetLock(store, this.lockTtlMs, options.pollMs ?? DEFAULT_POLL_MS, (g) => this.onNews(g));
    this.records = new FleetRecords(store, this.lock, reporter, this.gatewayNow);
    const { lockTtlMs, grantTimeoutMs, loginCooldownMs } = this;
    const limits = { lockTtlMs, grantTimeoutMs, loginCooldownMs };
    this.renewal = new FleetRenewal(store, this.records, this.lock, limits, log);
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

  /** A new token for the fleet: adopted, or fetched under the lock. */
  async acquire(basis: Basis, grants: FleetGrants): Promise<Acquired> {
    const { records } = this;
    const giveUpAt = performance.now() + this.lockTtlMs + this.grantTimeoutMs;
    let waitingSince: number | undefined;
    for (;;) {
      if (this.stopped) throw new Error('stopped');
      const seen = await records.read();
      const newer = superseding(seen.record, basis, this.accessUsable);
      if (newer) return records.adopted(newer, waitingSince);
      const lock = await this.lock.take();
      if (lock !== undefined) {
        records.waited(waitingSince);
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
   * if the store holds none, a dead one or an older chain (fleet-precedence.ts). Sharing takes the lock, so it
   * never writes over the record of a holder at work (that holder's news follows). Never calls the gateway, so
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

  private async underLock(lock: string, basis: Basis, grants: FleetGrants): Promise<Acquired | typeof MOVED> {
    try {
      const seen = await this.records.read();
      const newer = superseding(seen.record, basis, this.accessUsable);
      if (newer) return this.records.adopted(newer, undefined);
      // Stopped (shutdown) before claiming: the gateway is not called for a pod on its way out.
      if (this.stopped) throw new Error('stopped');
      // Our own token (got while the store was away) is newer than the store's: it is the one to go on from.
      const { held } = basis;
      const ownIsNewer = held && basis.local && (!seen.record || issuedLater(held, seen.record));
      const source = ownIsNewer ? { ...held, generation: (seen.record?.generation ?? 0) + 1 } : seen.record;
      return await this.renewal.renew(lock, seen, source, basis, grants);
    } finally {
      await this.lock.release(lock);
    }
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
  upstream: { readonly connectTimeoutMs: number; readonly responseTimeoutMs: number; readonly now: () => number },
): FleetToken | undefined {
  if (store.kind !== 'redis') return undefined;
  const { now } = upstream;
  // A token endpoint slower than the rest must not turn every grant into a lost one (spent, then a login).
  const httpBoundMs = upstream.connectTimeoutMs + upstream.responseTimeoutMs;
  return new FleetToken(store, reporter, log, {
    grantTimeoutMs: Math.max(DEFAULT_GRANT_TIMEOUT_MS, httpBoundMs + 5_000),
    gatewayNow: () => Math.max(now(), clock.timestampMs(now())),
  });
}
