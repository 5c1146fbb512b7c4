import type { Secret } from '../config/secret.js';
import type { Logger } from '../observability/log.js';
import type { SidecarMetrics } from '../observability/metrics.js';
import { StateStoreUnavailableError } from '../state/state-store.js';
import { recordFromSet, setFromRecord, type Acquired, type Basis } from './fleet-record.js';
import { LOCK_TAKEN, type FleetGrants, type FleetToken } from './fleet-token.js';
import { decideGrant } from './grant-decision.js';
import type { LocalTokenSource } from './local-source.js';
import type { TokenClient } from './token-client.js';
import type { HeldToken, TokenSource } from './token-source.js';
import type { TokenSet } from './token-set.js';
import type { TraceContext } from '../observability/tracing.js';

/** How often the record is read even without news (a publication is best effort, one can be lost). */
const SYNC_INTERVAL_MS = 10_000;
/**
 * How soon a replica that wanted to share its token, but found the lock taken, compares again: replicas coming back
 * together each want to share, one wins, and the others must not wait for the periodic read to see whether its
 * token or theirs is the newer one (a publication can be missed while their subscription is being restored).
 */
const LOCK_TAKEN_RETRY_MS = 250;

/**
 * Fleet mode: the replica's token is the fleet's (fleet-token.ts), as a TokenSet on this replica's clock. While the
 * store is away the token in memory is used to its end, then one of this replica's own (the local source); it is
 * offered to the fleet as soon as the store answers (rejoin). News (announcements, the store coming back, a
 * periodic read) is passed on to the manager, which then asks `sync`.
 */
export class FleetTokenSource implements TokenSource {
  readonly shared = true;
  private timer: NodeJS.Timeout | undefined;
  private retry: NodeJS.Timeout | undefined;
  private unlisten: (() => void) | undefined;
  private news: () => void = () => undefined;
  /** Aborted by stop(): ends the first token's wait for the store (shutdown). */
  private readonly stopping = new AbortController();
  /** The first token's wait for a connecting store is made once: a later attempt without a token does not wait. */
  private firstWaitSpent = false;
  /** When the store last went away (performance.now() ms); while it has never answered, when this replica started. */
  private storeAwaySince = performance.now();

  constructor(
    private readonly fleet: FleetToken,
    /** This replica's own grants and their bookkeeping (spent refresh token, generations, last login). */
    private readonly local: LocalTokenSource,
    private readonly client: TokenClient,
    private readonly metrics: SidecarMetrics,
    private readonly log: Logger,
    /** The manager's monotonic clock (ms), which TokenSet deadlines are on. */
    private readonly mono: () => number,
  ) {}

  start(onNews: () => void): void {
    const { fleet } = this;
    this.news = onNews;
    // Every announcement, even of the number held: after Redis came back empty the numbers start again from 1, so
    // the same number can name newer tokens. A read of the record decides (rejoin); news is rare.
    this.unlisten = fleet.listen(onNews);
    fleet.store.onAvailabilityChange((available) => {
      if (available) void fleet.subscribe().then(onNews);
      else this.storeAwaySince = performance.now();
    });
    // Redis lost the record: ours is shared again at once (rejoin), before a refresh finds none and logs in.
    fleet.onWipe(onNews);
    void fleet.subscribe();
    this.timer = setInterval(onNews, SYNC_INTERVAL_MS).unref();
  }

  stop(): void {
    this.stopping.abort();
    clearInterval(this.timer);
    clearTimeout(this.retry);
    this.unlisten?.();
    this.fleet.stop();
  }

  /** The fleet's token; when the store is away, the one in memory to its end, then one of this replica's own. */
  async acquire(held: HeldToken, trace?: TraceContext): Promise<TokenSet> {
    const shared =
      (await this.fromStore(held, trace)) ??
      (await this.firstOnceConnected(held, trace)) ??
      (await this.onceOutageOutlasted(held, trace));
    if (shared) return shared;
    // Kept: the manager looks again soon, and the store may well be back by then.
    if (held.set && decideGrant(this.local.state(held), 'store-away') === 'keep') return held.set;
    this.metrics.tokenStoreFallback();
    this.log.warn({ event: 'token.store_fallback' }, 'state store unavailable; getting a token for this replica alone');
    return this.local.acquire(held, trace, () => this.lookAgain(held, trace));
  }

  /**
   * The replica's first token while the store is still making its first connection (no answer, no failure yet):
   * from the store once it answers, rather than a login alone (FleetToken.firstConnectWaitMs). Waited for once, and
   * not once the replica holds a token; a store that failed is waited for as any store away (onceOutageOutlasted).
   */
  private async firstOnceConnected(held: HeldToken, trace: TraceContext | undefined): Promise<TokenSet | undefined> {
    if (held.set !== undefined || this.firstWaitSpent) return undefined;
    this.firstWaitSpent = true;
    const connected = await this.storeBack(this.fleet.firstConnectWaitMs, true);
    return connected ? this.fromStore(held, trace) : undefined;
  }

  /**
   * A login alone logs every other replica's callers out on a gateway where a login revokes earlier tokens (spec 4.1
   * rule 3): it is made for an outage, not for a blip (one command over its timeout on a loaded host, a reconnect).
   * Until the store has been away storeBackWaitMs (since this replica started, if it never answered), its return is
   * waited for. Neither a refresh alone (the token at its end) nor a login later in a longer outage waits.
   */
  private async onceOutageOutlasted(held: HeldToken, trace: TraceContext | undefined): Promise<TokenSet | undefined> {
    if (decideGrant(this.local.state(held), 'store-away') !== 'login') return undefined;
    const waitMs = this.storeAwaySince + this.fleet.storeBackWaitMs - performance.now();
    if (waitMs <= 0) return undefined;
    return (await this.storeBack(waitMs)) ? this.fromStore(held, trace) : undefined;
  }

  /**
   * Waits up to `withinMs` for the store to answer (with `settle`, only until its first failure); true once it does.
   * Stopped meanwhile (shutdown): throws, so that no grant follows, least of all a login alone.
   */
  private async storeBack(withinMs: number, settle = false): Promise<boolean> {
    const { signal } = this.stopping;
    const back = await this.fleet.store.whenAvailable(withinMs, settle, signal);
    if (signal.aborted) throw new Error('stopped');
    return back;
  }

  /**
   * This replica's refresh alone was refused: another replica most likely rotated that refresh token and shares the
   * successor on the store. Waits a little for the store, then for the record to bring it; the store still away:
   * the login alone follows. With the store back, a login goes through the fleet (its lock and cooldown).
   */
  private async lookAgain(held: HeldToken, trace: TraceContext | undefined): Promise<TokenSet | undefined> {
    const { fleet } = this;
    if (!(await this.storeBack(fleet.storeBackWaitMs))) return undefined;
    this.log.info(
      { event: 'token.looking_again', withinMs: fleet.lookAgainMs },
      "refresh refused; waiting for the fleet's record to bring a newer token before a login",
    );
    return this.fromStore(held, trace, performance.now() + fleet.lookAgainMs);
  }

  /**
   * Adopt the fleet's token if it is newer, or share ours if the store has none or an older one (FleetToken.rejoin).
   * Never calls the gateway.
   */
  async sync(held: HeldToken): Promise<TokenSet | undefined> {
    if (!this.fleet.store.isAvailable()) return undefined;
    let got: Acquired | undefined | typeof LOCK_TAKEN;
    try {
      got = await this.fleet.rejoin(this.basis(held));
    } catch {
      return undefined; // away again: what is held stays in use
    }
    if (got === LOCK_TAKEN) {
      clearTimeout(this.retry);
      this.retry = setTimeout(this.news, LOCK_TAKEN_RETRY_MS).unref();
      return undefined;
    }
    return got && this.fromFleet(got);
  }

  /** undefined when the store is away. */
  private async fromStore(
    held: HeldToken,
    trace: TraceContext | undefined,
    lookAgainUntil?: number,
  ): Promise<TokenSet | undefined> {
    if (!this.fleet.store.isAvailable()) return undefined;
    try {
      return this.fromFleet(await this.fleet.acquire(this.basis(held), this.grants(held, trace), lookAgainUntil));
    } catch (err) {
      if (err instanceof StateStoreUnavailableError) return undefined;
      throw err;
    }
  }

  private basis({ set, usable }: HeldToken): Basis {
    return {
      held: set && recordFromSet(set, this.local.isSpent(set)),
      local: set?.recordGeneration === undefined,
      usable: usable(),
    };
  }

  private fromFleet({ record, via }: Acquired): TokenSet {
    const clocks = { mono: this.mono(), gatewayNow: this.fleet.gatewayNow() };
    const recordGeneration = via === 'unwritten' ? undefined : record.generation;
    const set = setFromRecord(record, this.local.nextGeneration(), recordGeneration, clocks);
    if (record.refreshSpent) this.local.setSpent(set.generation);
    if (via === 'adopted') {
      this.log.info({ event: 'token.adopted', generation: record.generation }, "took the fleet's token into use");
    }
    return set;
  }

  /** The refresh token the fleet sends may be the one this replica holds: then it is spent here too. */
  private grants({ set }: HeldToken, trace: TraceContext | undefined): FleetGrants {
    const { local, client } = this;
    return {
      refresh: (refreshToken) => local.call('refresh_token', () => client.refreshGrant(refreshToken), trace),
      login: () => local.call('password', () => client.passwordGrant(), trace),
      heldMark: (refreshToken: Secret) => {
        const ours = set !== undefined && set.refreshToken.reveal() === refreshToken.reveal();
        return {
          mark: () => {
            if (ours) local.setSpent(set.generation);
            return Promise.resolve(true);
          },
          unmark: () => {
            if (ours) local.setSpent(0);
            return Promise.resolve(true);
          },
        };
      },
    };
  }
}
