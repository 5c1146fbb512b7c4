import type { Logger } from '../observability/log.js';
import type { SidecarMetrics } from '../observability/metrics.js';
import { sidecarErrors } from '../errors.js';
import type { TraceContext, Tracing } from '../observability/tracing.js';
import { backoffDelayMs } from './backoff.js';
import { FleetTokenSource } from './fleet-source.js';
import type { FleetToken } from './fleet-token.js';
import { LocalTokenSource } from './local-source.js';
import type { TokenClient } from './token-client.js';
import type { HeldToken, TokenSource } from './token-source.js';
import { EXPIRY_MARGIN_MS, type TokenSet } from './token-set.js';

export interface TokenManagerOptions {
  readonly refreshAheadMinSeconds: number;
  readonly refreshAheadMaxSeconds: number;
  readonly backoffBaseMs?: number;
  readonly backoffMaxMs: number;
  /** How long a request may wait for an in-flight login or refresh before it is answered 503. */
  readonly waitForTokenMs?: number;
  readonly monotonicNow?: () => number;
  readonly random?: () => number;
  /** Fleet mode (a shared state store): one token for every replica of the account. Absent: this replica's own. */
  readonly fleet?: FleetToken;
  /** Each grant is a span, under the wait of the request that started it (docs/operations.md#tracing). */
  readonly tracing?: Tracing;
}

/** The soonest a refresh is scheduled after a token was installed. */
const MIN_REFRESH_INTERVAL_MS = 1_000;
/** While a source keeps the token in memory (the store is away), how often to look again. */
const STORE_RECHECK_MS = 1_000;
/** The longest shutdown waits for a fleet grant in flight (settle): a token grant takes well under a second. */
const SETTLE_MAX_MS = 5_000;
/**
 * How long a request waits for a login or refresh in flight when waitForTokenMs is not given (no setting changes
 * it); the request deadline (src/egress/request-deadline.ts) counts the wait the manager has twice.
 */
export const DEFAULT_WAIT_FOR_TOKEN_MS = 10_000;

/**
 * Holds one access token for the sidecar and keeps it valid (spec 4.1, 5.1):
 * - single flight: every caller that needs a token while one is being fetched shares that one fetch;
 * - generations: many 401s for the same generation invalidate it once, so exactly one new token is fetched;
 * - refresh ahead of expiry (jittered), refresh token rotation (the newest is kept, none is sent twice),
 *   password login when refreshing is impossible (which grant: grant-decision.ts), capped backoff with jitter when
 *   the gateway is unreachable.
 * Where tokens come from is its source (token-source.ts): this replica's own grants (local-source.ts), or in fleet
 * mode (options.fleet) the fleet's shared record (fleet-source.ts).
 */
export class TokenManager {
  private current: TokenSet | undefined;
  private rejectedGeneration = 0;
  private inflight: Promise<TokenSet> | undefined;
  private failures = 0;
  private timer: NodeJS.Timeout | undefined;
  private stopped = false;
  private readonly mono: () => number;
  private readonly source: TokenSource;
  /** How long a request waits for a login or refresh in flight before it is answered 503 (at most twice a request). */
  readonly waitForTokenMs: number;

  constructor(
    client: TokenClient,
    private readonly options: TokenManagerOptions,
    private readonly metrics: SidecarMetrics,
    private readonly log: Logger,
  ) {
    this.mono = options.monotonicNow ?? (() => performance.now());
    this.waitForTokenMs = options.waitForTokenMs ?? DEFAULT_WAIT_FOR_TOKEN_MS;
    const { fleet } = options;
    const local = new LocalTokenSource(
      client,
      metrics,
      log,
      this.mono,
      fleet?.loginCooldownMs ?? 0,
      fleet?.gatewayNow,
      options.tracing,
    );
    this.source = fleet ? new FleetTokenSource(fleet, local, client, metrics, log, this.mono) : local;
  }

  /** Starts the first login in the background; readiness reports when a token is held. */
  start(): void {
    this.source.start(() => void this.sync());
    this.fetchInBackground();
  }

  stop(): void {
    this.stopped = true;
    clearTimeout(this.timer);
    this.source.stop();
  }

  /**
   * Fleet mode: resolves once the token fetch in flight has ended (at most SETTLE_MAX_MS). Shutdown waits for it
   * before closing the store: a refresh the gateway granted then reaches the fleet, instead of leaving the record's
   * refresh token spent and its successor lost with the pod (the next replica would have to log in). A single pod
   * has nobody to hand its token to: at once.
   */
  async settle(): Promise<void> {
    const flight = this.inflight;
    if (!this.source.shared || !flight) return;
    let timer: NodeJS.Timeout | undefined;
    const cap = new Promise<void>((resolve) => (timer = setTimeout(resolve, SETTLE_MAX_MS)));
    await Promise.race([flight.then(noop, noop), cap]);
    clearTimeout(timer);
  }

  /** Fleet mode: the token is the fleet's, shared on the state store with the other replicas of the account. */
  get shared(): boolean {
    return this.source.shared;
  }

  /** True while a token that is not expired and not rejected is held. */
  hasValidToken(): boolean {
    return this.usableToken() !== undefined;
  }

  /** The current token when it can be used right away: the hot path, with no promise to wait on. */
  usableToken(): TokenSet | undefined {
    return this.usable(this.current);
  }

  /**
   * The current token, or the one being fetched; throws sidecar.token.unavailable when none can be had. `signal`
   * (the request's deadline) ends the wait early; the fetch itself goes on for the others. `trace`: the span of the
   * wait, under which a grant this call starts is traced.
   */
  async token(signal?: AbortSignal, trace?: TraceContext): Promise<TokenSet> {
    const usable = this.usableToken();
    if (usable) return usable;
    if (this.inflight) return this.awaitFlight(this.inflight, signal);
    // While logins are failing, requests are answered at once and the backoff schedule is kept: a burst of
    // client requests must not turn into a burst of logins against the gateway.
    if (this.failures > 0) throw sidecarErrors.tokenUnavailable();
    return this.awaitFlight(this.beginFlight(trace), signal);
  }

  /**
   * Called when the gateway answered 401 FAILED to a request made with `generation`. Only the first report of a
   * generation starts a fetch; the others join it. Resolves with a token of a newer generation.
   */
  async tokenAfterRejection(generation: number, signal?: AbortSignal, trace?: TraceContext): Promise<TokenSet> {
    if (this.current?.generation === generation && this.rejectedGeneration < generation) {
      this.rejectedGeneration = generation;
      this.log.warn({ event: 'token.rejected', generation }, 'gateway rejected the access token; fetching a new one');
      if (!this.inflight) void this.beginFlight(trace).catch(() => undefined);
    }
    const fresh = this.usable(this.current);
    if (fresh && fresh.generation > generation) return fresh;
    // The shared fetch already failed: keep to the backoff schedule instead of starting another one per 401.
    if (!this.inflight && this.failures > 0) throw sidecarErrors.tokenUnavailable();
    const next = await this.awaitFlight(this.inflight ?? this.beginFlight(trace), signal);
    if (next.generation <= generation) throw sidecarErrors.tokenUnavailable();
    return next;
  }

  private usable(set: TokenSet | undefined): TokenSet | undefined {
    if (!set || set.generation <= this.rejectedGeneration) return undefined;
    return this.mono() < set.accessDeadline - EXPIRY_MARGIN_MS ? set : undefined;
  }

  private async awaitFlight(flight: Promise<TokenSet>, signal: AbortSignal | undefined): Promise<TokenSet> {
    const waitMs = this.waitForTokenMs;
    const deadline = signal ? AbortSignal.any([signal, AbortSignal.timeout(waitMs)]) : AbortSignal.timeout(waitMs);
    let onAbort: (() => void) | undefined;
    const ended = new Promise<never>((_, reject) => {
      onAbort = () => reject(sidecarErrors.tokenUnavailable());
      if (deadline.aborted) onAbort();
      else deadline.addEventListener('abort', onAbort, { once: true });
    });
    try {
      return await Promise.race([flight, ended]);
    } catch {
      throw sidecarErrors.tokenUnavailable();
    } finally {
      if (onAbort) deadline.removeEventListener('abort', onAbort);
    }
  }

  private fetchInBackground(): void {
    if (this.stopped) return;
    // Failures are handled (logged, backoff scheduled) inside the flight; nothing to do with the rejection here.
    (this.inflight ?? this.beginFlight()).catch(() => undefined);
  }

  private beginFlight(trace?: TraceContext): Promise<TokenSet> {
    const flight = this.source.acquire(this.held(), trace).then(
      (set) => (set === this.current ? this.recheckLater(set) : this.install(set)),
      (err: unknown) => {
        // The messages are this module's and the token client's (status, code, network error): never a secret.
        if (!this.stopped) this.scheduleRetry(err instanceof Error ? err.message : String(err));
        throw err;
      },
    );
    this.inflight = flight;
    const clear = () => {
      if (this.inflight === flight) this.inflight = undefined;
    };
    flight.then(clear, clear);
    return flight;
  }

  /** What is held, as the source sees it. */
  private held(): HeldToken {
    const set = this.current;
    return { set, usable: () => this.usable(set) !== undefined };
  }

  /**
   * The source may have a newer token (a replica announced one, the store is back, or this replica holds one of
   * its own): take it if the source says so. Not while a flight is under way: that flight reads the store itself.
   */
  private async sync(): Promise<void> {
    if (this.stopped || this.inflight) return;
    const held = this.current;
    const got = await this.source.sync(this.held());
    if (got === undefined || this.current !== held || this.stopped || this.inflight) return;
    this.install(got);
  }

  private install(set: TokenSet): TokenSet {
    // One assignment replaces access and refresh token together: the newest refresh token is the only one kept.
    this.current = set;
    this.failures = 0;
    this.metrics.tokenExpiries(set.accessExpiresAtMs, set.refreshExpiresAtMs);
    if (set.recordGeneration !== undefined) this.metrics.tokenGeneration(set.recordGeneration);
    // A token of this replica alone (the store went away, or would not take it) is offered to the fleet as soon
    // as the store answers: the others then need no login of their own. After this flight has ended.
    else if (this.source.shared) setImmediate(() => void this.sync());
    this.scheduleRefresh(set);
    return set;
  }

  /** Kept by the source (the store is away): looked at again soon, and no later than when it stops being usable. */
  private recheckLater(set: TokenSet): TokenSet {
    const untilUnusable = set.accessDeadline - EXPIRY_MARGIN_MS - this.mono();
    this.arm(Math.max(0, Math.min(STORE_RECHECK_MS, untilUnusable)));
    return set;
  }

  private scheduleRefresh(set: TokenSet): void {
    const { refreshAheadMinSeconds: min, refreshAheadMaxSeconds: max } = this.options;
    const random = this.options.random ?? Math.random;
    const lifetimeMs = set.accessDeadline - this.mono();
    // Never more than half the lifetime ahead, and never sooner than a floor: a gateway issuing short-lived
    // (or already expired, by a skewed clock) tokens must not be hammered in a tight loop.
    const aheadMs = Math.min((min + random() * (max - min)) * 1000, lifetimeMs / 2);
    const inMs = Math.max(MIN_REFRESH_INTERVAL_MS, lifetimeMs - aheadMs);
    this.arm(inMs);
  }

  private scheduleRetry(reason: string): void {
    const delay = backoffDelayMs(
      this.failures++,
      this.options.backoffBaseMs ?? 500,
      this.options.backoffMaxMs,
      this.options.random,
    );
    this.log.warn(
      { event: 'token.retry_scheduled', inMs: delay, failures: this.failures, reason },
      'no new token; retrying with backoff',
    );
    this.arm(delay);
  }

  private arm(inMs: number): void {
    clearTimeout(this.timer);
    if (this.stopped) return;
    // setTimeout runs on the monotonic clock: a wall-clock jump neither fires it early nor stalls it.
    this.timer = setTimeout(() => this.fetchInBackground(), inMs);
    this.timer.unref();
  }
}

function noop(): void {
  // a failed fetch was already logged and its retry scheduled
}
