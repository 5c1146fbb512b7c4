import type { Logger } from '../observability/log.js';
import type { SidecarMetrics, TokenGrant } from '../observability/metrics.js';
import { NO_TRACING, type TraceContext, type Tracing } from '../observability/tracing.js';
import { callGrant } from './grant-calls.js';
import {
  decideGrant,
  loginError,
  sendRefresh,
  type GrantReason,
  type HeldState,
  type SpentMark,
} from './grant-decision.js';
import type { TokenClient } from './token-client.js';
import type { HeldToken, TokenSource } from './token-source.js';
import { EXPIRY_MARGIN_MS, type GrantResult, type GrantedTokens, type TokenSet } from './token-set.js';

/**
 * This replica's own grants (a single pod; in fleet mode while the store is away), and the bookkeeping every grant
 * of the replica shares, the fleet's included: the refresh token that was sent (never sent again), generation
 * numbers, the last login.
 */
export class LocalTokenSource implements TokenSource {
  readonly shared = false;
  /** Generation whose refresh token was sent (and so may be consumed): it is never sent again. */
  private spentRefreshGeneration = 0;
  private generation = 0;
  /** When this replica last sent a password grant (monotonic ms), the fleet's or its own. */
  private lastLoginAt = Number.NEGATIVE_INFINITY;

  constructor(
    private readonly client: TokenClient,
    private readonly metrics: SidecarMetrics,
    private readonly log: Logger,
    private readonly mono: () => number,
    /**
     * Fleet mode with the store away: the fleet-wide login cooldown cannot be checked, so this replica keeps it for
     * itself. Replicas that each log in revoke each other's tokens (spec 4.1 rule 3); without it each refused token
     * would bring an immediate login, a loop of logins for as long as the outage lasts. A single pod: 0.
     */
    private readonly loginCooldownMs: number,
    /** The gateway's time as this replica best knows it (ms), for when tokens were issued. */
    private readonly gatewayNow: () => number = Date.now,
    /** Each grant is a span (under the request that waits for it, if one does). */
    private readonly tracing: Tracing = NO_TRACING,
  ) {}

  start(): void {
    // this replica's own tokens: no news
  }

  stop(): void {
    // nothing held open
  }

  sync(): Promise<TokenSet | undefined> {
    return Promise.resolve(undefined);
  }

  isSpent(set: TokenSet): boolean {
    return set.generation === this.spentRefreshGeneration;
  }

  setSpent(generation: number): void {
    this.spentRefreshGeneration = generation;
  }

  nextGeneration(): number {
    return ++this.generation;
  }

  /**
   * Refresh when a refresh token is held and alive, else (or when refreshing fails) log in with the password.
   * `lookAgain` (fleet mode, the store away): where a refused refresh's successor may be found before a login.
   */
  async acquire(
    held: HeldToken,
    trace?: TraceContext,
    lookAgain?: () => Promise<TokenSet | undefined>,
  ): Promise<TokenSet> {
    const { set } = held;
    let decision = decideGrant(this.state(held), 'renew');
    if (set && decision === 'refresh') {
      const attempt = await sendRefresh(this.spentMark(set), () =>
        this.call('refresh_token', () => this.client.refreshGrant(set.refreshToken), trace),
      );
      const result = attempt?.result;
      if (result?.kind === 'granted') return this.toSet(result.tokens, set);
      const reason: GrantReason = attempt?.unmarked
        ? 'refresh-unsent'
        : result?.kind === 'rejected'
          ? 'refresh-refused'
          : 'renew';
      const successorMayBeShared = lookAgain !== undefined && reason === 'refresh-refused';
      decision = decideGrant({ ...this.state(held), successorMayBeShared }, reason);
      if (decision === 'keep') {
        // Gateway unreachable but the access token still works: retry the refresh later rather than log in,
        // because a password login would invalidate the access token in use (spec 4.1 rule 3).
        throw new Error(`refresh failed before sending: ${result?.kind === 'failed' ? result.reason : ''}`);
      }
      if (decision === 'look-again' && lookAgain) {
        const successor = await lookAgain();
        if (successor) return successor;
        decision = decideGrant(this.state(held), 'refresh-refused');
      }
      // Rejected, or sent without an answer (the token may have been consumed): a refresh token is never sent
      // twice, so the only way on is a password login.
      this.log.warn({ event: 'token.fallback', reason: result?.kind }, 'refresh failed; logging in with the password');
    }
    if (decision === 'wait') {
      throw new Error(`this replica logged in less than ${this.loginCooldownMs} ms ago; not logging in again`);
    }
    const login = await this.call('password', () => this.client.passwordGrant(), trace);
    if (login.kind === 'granted') return this.toSet(login.tokens, undefined);
    throw loginError(login);
  }

  /** This replica's mark: the generation whose refresh token was handed to the network. */
  private spentMark(set: TokenSet): SpentMark {
    return {
      mark: () => {
        this.spentRefreshGeneration = set.generation;
        return Promise.resolve(true);
      },
      unmark: () => {
        this.spentRefreshGeneration = 0;
        return Promise.resolve(true);
      },
    };
  }

  /** One grant, counted and logged; a password grant starts this replica's login cooldown. */
  async call(grant: TokenGrant, send: () => Promise<GrantResult>, trace?: TraceContext): Promise<GrantResult> {
    const previousLogin = this.lastLoginAt;
    if (grant === 'password') this.lastLoginAt = this.mono();
    const traced = this.tracing.enabled ? { tracing: this.tracing, parent: trace } : undefined;
    const result = await callGrant(grant, send, this.metrics, this.log, traced);
    // A login that never left (gateway unreachable) revoked nothing: no cooldown for it.
    if (grant === 'password' && result.kind === 'failed' && !result.sent) this.lastLoginAt = previousLogin;
    return result;
  }

  /** The held token as grant-decision.ts sees it, by this replica's clock and bookkeeping. */
  state({ set, usable }: HeldToken): HeldState {
    const now = this.mono();
    const refresh = !set
      ? 'none'
      : this.isSpent(set)
        ? 'spent'
        : now < set.refreshDeadline - EXPIRY_MARGIN_MS
          ? 'alive'
          : 'expired';
    return { accessUsable: usable(), refresh, loginCoolingDown: now - this.lastLoginAt < this.loginCooldownMs };
  }

  private toSet(tokens: GrantedTokens, chain: TokenSet | undefined): TokenSet {
    const now = this.mono();
    const issuedAtMs = this.gatewayNow();
    return {
      generation: ++this.generation,
      accessToken: tokens.accessToken,
      refreshToken: tokens.refreshToken,
      accessExpiresAtMs: tokens.accessExpiresAtMs,
      refreshExpiresAtMs: tokens.refreshExpiresAtMs,
      accessDeadline: now + tokens.accessRemainingMs,
      refreshDeadline: now + tokens.refreshRemainingMs,
      loginAtMs: chain?.loginAtMs ?? issuedAtMs,
      issuedAtMs,
    };
  }
}
