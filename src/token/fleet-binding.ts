import type { Logger } from '../observability/log.js';
import type { TokenGrant } from '../observability/metrics.js';
import { StateStoreUnavailableError } from '../state/state-store.js';
import type { Basis } from './fleet-precedence.js';
import type { Acquired } from './fleet-records.js';
import type { FleetGrants } from './fleet-renewal.js';
import { LOCK_TAKEN, type FleetToken } from './fleet-token.js';
import { recordFromSet, setFromRecord } from './shared-token-record.js';
import type { TokenClient } from './token-client.js';
import type { GrantResult, TokenSet } from './token-set.js';

/** Fleet mode: how often the record is read even without news (a publication is best effort, one can be lost). */
const SYNC_INTERVAL_MS = 10_000;
/**
 * How soon a replica that wanted to share its token, but found the lock taken, compares again: replicas coming back
 * together each want to share, one wins, and the others must not wait for the periodic read to see whether its
 * token or theirs is the newer one (a publication can be missed while their subscription is being restored).
 */
const LOCK_TAKEN_RETRY_MS = 250;

/** What the token manager lets the fleet binding see and do. */
export interface TokenHost {
  /** The token held now, rejected or not. */
  held(): TokenSet | undefined;
  usable(set: TokenSet | undefined): TokenSet | undefined;
  /** Its refresh token was handed to the network (never to be sent again). */
  isSpent(set: TokenSet): boolean;
  setSpent(generation: number): void;
  nextGeneration(): number;
  /** The manager's monotonic clock (ms), which TokenSet deadlines are on. */
  mono(): number;
  /** A login or refresh is in flight, or the manager stopped: it reads the store itself, or nothing should. */
  busy(): boolean;
  install(set: TokenSet): void;
  call(grant: TokenGrant, send: () => Promise<GrantResult>): Promise<GrantResult>;
}

/**
 * Ties one replica's token manager to the fleet's token (fleet-token.ts): what it holds as a record, the record
 * as its TokenSet, the grants it makes on the fleet's behalf, and keeping up with the fleet (announcements, the
 * store coming back, a periodic read).
 */
export class FleetBinding {
  private timer: NodeJS.Timeout | undefined;
  private retry: NodeJS.Timeout | undefined;

  constructor(
    readonly fleet: FleetToken,
    private readonly host: TokenHost,
    private readonly client: TokenClient,
    private readonly log: Logger,
  ) {}

  start(): void {
    const { fleet } = this;
    // Every announcement, even of the number held: after Redis came back empty the numbers start again from 1, so
    // the same number can name newer tokens. A read of the record decides (rejoin); news is rare.
    fleet.onNews = () => void this.sync();
    fleet.store.onAvailabilityChange((available) => {
      if (available) void fleet.subscribe().then(() => this.sync());
    });
    void fleet.subscribe();
    this.timer = setInterval(() => void this.sync(), SYNC_INTERVAL_MS).unref();
  }

  stop(): void {
    clearInterval(this.timer);
    clearTimeout(this.retry);
    this.fleet.stop();
  }

  /** The fleet's token; undefined when the store is away (the manager then decides). */
  async acquire(): Promise<TokenSet | undefined> {
    if (!this.fleet.store.isAvailable()) return undefined;
    try {
      return this.fromFleet(await this.fleet.acquire(this.basis(), this.grants()));
    } catch (err) {
      if (err instanceof StateStoreUnavailableError) return undefined;
      throw err;
    }
  }

  /**
   * A replica announced a new generation, the store is back, or this replica holds a token of its own: take the
   * fleet's token if it is newer, or share ours if the store has none or an older one (FleetToken.rejoin).
   * Never calls the gateway.
   */
  async sync(): Promise<void> {
    if (this.host.busy() || !this.fleet.store.isAvailable()) return;
    const held = this.host.held();
    let got: Acquired | undefined | typeof LOCK_TAKEN;
    try {
      got = await this.fleet.rejoin(this.basis());
    } catch {
      return; // away again: what is held stays in use
    }
    if (got === LOCK_TAKEN) {
      clearTimeout(this.retry);
      this.retry = setTimeout(() => void this.sync(), LOCK_TAKEN_RETRY_MS).unref();
      return;
    }
    if (got === undefined || this.host.held() !== held || this.host.busy()) return;
    this.host.install(this.fromFleet(got));
  }

  private basis(): Basis {
    const held = this.host.held();
    return {
      held: held && recordFromSet(held, this.host.isSpent(held)),
      local: held?.recordGeneration === undefined,
      usable: this.host.usable(held) !== undefined,
    };
  }

  private fromFleet({ record, via }: Acquired): TokenSet {
    const clocks = { mono: this.host.mono(), gatewayNow: this.fleet.gatewayNow() };
    const recordGeneration = via === 'unwritten' ? undefined : record.generation;
    const set = setFromRecord(record, this.host.nextGeneration(), recordGeneration, clocks);
    if (record.refreshSpent) this.host.setSpent(set.generation);
    if (via === 'adopted') {
      this.log.info({ event: 'token.adopted', generation: record.generation }, "took the fleet's token into use");
    }
    return set;
  }

  /** The refresh token the fleet sends may be the one this replica holds: then it is spent here too. */
  private grants(): FleetGrants {
    return {
      refresh: async (refreshToken) => {
        const held = this.host.held();
        const ours = held !== undefined && held.refreshToken.reveal() === refreshToken.reveal();
        if (ours) this.host.setSpent(held.generation);
        const result = await this.host.call('refresh_token', () => this.client.refreshGrant(refreshToken));
        if (ours && result.kind === 'failed' && !result.sent) this.host.setSpent(0);
        return result;
      },
      login: () => this.host.call('password', () => this.client.passwordGrant()),
    };
  }
}
