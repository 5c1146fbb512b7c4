import type { Logger } from '../observability/log.js';
import type { SidecarMetrics, TokenGrant } from '../observability/metrics.js';
import type { FleetToken } from './fleet-token.js';
import { callGrant } from './grant-calls.js';
import type { TokenClient } from './token-client.js';
import { EXPIRY_MARGIN_MS, type GrantResult, type GrantedTokens, type TokenSet } from './token-set.js';

/**
 * Which grant gets this replica a token of its own (refresh while a refresh token is held and alive, else a
 * password login, behind this replica's own cooldown in fleet mode), and the bookkeeping every grant shares, the
 * fleet's included: the refresh token that was sent (never sent again), generation numbers, the last login.
 */
export class GrantPolicy {
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
    /** The manager's rule for a token requests can still use (not rejected, not about to expire). */
    private readonly usable: (set: TokenSet | undefined) => TokenSet | undefined,
    private readonly fleet: FleetToken | undefined,
  ) {}

  isSpent(set: TokenSet): boolean {
    return set.generation === this.spentRefreshGeneration;
  }

  setSpent(generation: number): void {
    this.spentRefreshGeneration = generation;
  }

  nextGeneration(): number {
    return ++this.generation;
  }

  /** Refresh when a refresh token is held and alive, else (or when refreshing fails) log in with the password. */
  async acquire(held: TokenSet | undefined): Promise<TokenSet> {
    const refreshable = held !== undefined && held.generation !== this.spentRefreshGeneration;
    if (refreshable && this.mono() < held.refreshDeadline - EXPIRY_MARGIN_MS) {
      // Spent from the moment it is handed to the network: whatever happens next, it is never sent again
      // (rotation, spec 4.1 rule 1) unless it provably never left.
      this.spentRefreshGeneration = held.generation;
      const refreshed = await this.call('refresh_token', () => this.client.refreshGrant(held.refreshToken));
      if (refreshed.kind === 'granted') return this.toSet(refreshed.tokens, held);
      if (refreshed.kind === 'failed' && !refreshed.sent) this.spentRefreshGeneration = 0;
      if (refreshed.kind === 'failed' && !refreshed.sent && this.usable(held)) {
        // Gateway unreachable but the access token still works: retry the refresh later rather than log in,
        // because a password login would invalidate the access token in use (spec 4.1 rule 3).
        throw new Error(`refresh failed before sending: ${refreshed.reason}`);
      }
      // Rejected, or sent without an answer (the token may have been consumed): a refresh token is never sent
      // twice, so the only way on is a password login.
      this.log.warn(
        { event: 'token.fallback', reason: refreshed.kind },
        'refresh failed; logging in with the password',
      );
    }
    this.ownLoginCooldown();
    const login = await this.call('password', () => this.client.passwordGrant());
    if (login.kind === 'granted') return this.toSet(login.tokens, undefined);
    throw new Error(login.kind === 'rejected' ? `login rejected (${login.status} ${login.code ?? ''})` : login.reason);
  }

  /** One grant, counted and logged; a password grant starts this replica's login cooldown. */
  async call(grant: TokenGrant, send: () => Promise<GrantResult>): Promise<GrantResult> {
    const previousLogin = this.lastLoginAt;
    if (grant === 'password') this.lastLoginAt = this.mono();
    const result = await callGrant(grant, send, this.metrics, this.log);
    // A login that never left (gateway unreachable) revoked nothing: no cooldown for it.
    if (grant === 'password' && result.kind === 'failed' && !result.sent) this.lastLoginAt = previousLogin;
    return result;
  }

  /**
   * Fleet mode with the store away: the fleet-wide login cooldown cannot be checked, so this replica keeps it for
   * itself (issue 16: "its own login, with the cooldown"). Replicas that each log in revoke each other's tokens
   * (spec 4.1 rule 3); without it each refused token would bring an immediate login, a loop of logins for as long
   * as the outage lasts. Refused here, the fetch goes through the usual backoff. A single pod: no cooldown.
   */
  private ownLoginCooldown(): void {
    const cooldownMs = this.fleet?.loginCooldownMs ?? 0;
    if (this.mono() - this.lastLoginAt < cooldownMs) {
      throw new Error(`this replica logged in less than ${cooldownMs} ms ago; not logging in again`);
    }
  }

  private toSet(tokens: GrantedTokens, chain: TokenSet | undefined): TokenSet {
    const now = this.mono();
    const issuedAtMs = this.fleet?.gatewayNow() ?? Date.now();
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
