import { sidecarErrors } from '../errors.js';
import { backoffDelayMs } from './backoff.js';
/** Tokens usable by requests: a token this close to expiry is treated as expired (it could die in transit). */
const EXPIRY_MARGIN_MS = 2_000;
/**
 * Holds one access token for the sidecar and keeps it valid (spec 4.1, 5.1):
 * - single flight: every caller that needs a token while one is being fetched shares that one fetch;
 * - generations: many 401s for the same generation invalidate it once, so exactly one new token is fetched;
 * - refresh ahead of expiry (jittered), refresh token rotation (the newest is kept, none is sent twice),
 *   password login when refreshing is impossible, capped backoff with jitter when the gateway is unreachable.
 */
export class TokenManager {
    client;
    options;
    metrics;
    log;
    current;
    rejectedGeneration = 0;
    generation = 0;
    inflight;
    failures = 0;
    timer;
    stopped = false;
    mono;
    constructor(client, options, metrics, log) {
        this.client = client;
        this.options = options;
        this.metrics = metrics;
        this.log = log;
        this.mono = options.monotonicNow ?? (() => performance.now());
    }
    /** Starts the first login in the background; readiness reports when a token is held. */
    start() {
        this.fetchInBackground();
    }
    stop() {
        this.stopped = true;
        clearTimeout(this.timer);
    }
    /** True while a token that is not expired and not rejected is held. */
    hasValidToken() {
        return this.usable(this.current) !== undefined;
    }
    /** The current token, or the one being fetched; throws sidecar.token.unavailable when none can be had. */
    async token() {
        const usable = this.usable(this.current);
        if (usable)
            return usable;
        if (this.inflight)
            return this.awaitFlight(this.inflight);
        // While logins are failing, requests are answered at once and the backoff schedule is kept: a burst of
        // client requests must not turn into a burst of logins against the gateway.
        if (this.failures > 0)
            throw sidecarErrors.tokenUnavailable();
        return this.awaitFlight(this.beginFlight());
    }
    /**
     * Called when the gateway answered 401 FAILED to a request made with `generation`. Only the first report of a
     * generation starts a fetch; the others join it. Resolves with a token of a newer generation.
     */
    async tokenAfterRejection(generation) {
        if (this.current?.generation === generation && this.rejectedGeneration < generation) {
            this.rejectedGeneration = generation;
            this.log.warn({ event: 'token.rejected', generation }, 'gateway rejected the access token; fetching a new one');
            if (!this.inflight)
                void this.beginFlight().catch(() => undefined);
        }
        const fresh = this.usable(this.current);
        if (fresh && fresh.generation > generation)
            return fresh;
        const next = await this.awaitFlight(this.inflight ?? this.beginFlight());
        if (next.generation <= generation)
            throw sidecarErrors.tokenUnavailable();
        return next;
    }
    usable(set) {
        if (!set || set.generation <= this.rejectedGeneration)
            return undefined;
        return this.mono() < set.accessDeadline - EXPIRY_MARGIN_MS ? set : undefined;
    }
    async awaitFlight(flight) {
        const waitMs = this.options.waitForTokenMs ?? 10_000;
        let timer;
        const timeout = new Promise((_, reject) => {
            timer = setTimeout(() => reject(sidecarErrors.tokenUnavailable()), waitMs);
        });
        try {
            return await Promise.race([flight, timeout]);
        }
        catch {
            throw sidecarErrors.tokenUnavailable();
        }
        finally {
            clearTimeout(timer);
        }
    }
    fetchInBackground() {
        if (this.stopped)
            return;
        // Failures are handled (logged, backoff scheduled) inside the flight; nothing to do with the rejection here.
        (this.inflight ?? this.beginFlight()).catch(() => undefined);
    }
    beginFlight() {
        const flight = this.acquire().then((set) => this.install(set), (err) => {
            this.scheduleRetry();
            throw err;
        });
        this.inflight = flight;
        const clear = () => {
            if (this.inflight === flight)
                this.inflight = undefined;
        };
        flight.then(clear, clear);
        return flight;
    }
    /** Refresh when a refresh token is held and alive, else (or when refreshing fails) log in with the password. */
    async acquire() {
        const held = this.current;
        if (held && this.mono() < held.refreshDeadline - EXPIRY_MARGIN_MS) {
            const refreshed = await this.call('refresh_token', () => this.client.refreshGrant(held.refreshToken));
            if (refreshed.kind === 'granted')
                return this.toSet(refreshed.tokens);
            if (refreshed.kind === 'failed' && !refreshed.sent && this.usable(held)) {
                // Gateway unreachable but the access token still works: retry the refresh later rather than log in,
                // because a password login would invalidate the access token in use (spec 4.1 rule 3).
                throw new Error(`refresh failed before sending: ${refreshed.reason}`);
            }
            // Rejected, or sent without an answer (the token may have been consumed): a refresh token is never sent
            // twice, so the only way on is a password login.
            this.log.warn({ event: 'token.fallback', reason: refreshed.kind }, 'refresh failed; logging in with the password');
        }
        const login = await this.call('password', () => this.client.passwordGrant());
        if (login.kind === 'granted')
            return this.toSet(login.tokens);
        throw new Error(login.kind === 'rejected' ? `login rejected (${login.status} ${login.code ?? ''})` : login.reason);
    }
    async call(grant, send) {
        const result = await send();
        const outcome = result.kind === 'granted' ? 'success' : result.kind === 'rejected' ? 'rejected' : 'error';
        this.metrics.tokenCall(grant, outcome);
        if (result.kind === 'granted') {
            this.log.info({ event: 'token.granted', grant, accessExpiresAt: new Date(result.tokens.accessExpiresAtMs).toISOString(),
                refreshExpiresAt: new Date(result.tokens.refreshExpiresAtMs).toISOString() }, 'token endpoint granted new tokens');
        }
        else if (result.kind === 'rejected') {
            this.log.warn({ event: 'token.rejected_grant', grant, status: result.status, code: result.code, gatewayMessage: result.message }, 'token endpoint refused the grant');
        }
        else {
            this.log.warn({ event: 'token.grant_failed', grant, sent: result.sent, reason: result.reason }, 'token endpoint call failed');
        }
        return result;
    }
    toSet(tokens) {
        const now = this.mono();
        return {
            generation: ++this.generation,
            accessToken: tokens.accessToken,
            refreshToken: tokens.refreshToken,
            accessExpiresAtMs: tokens.accessExpiresAtMs,
            refreshExpiresAtMs: tokens.refreshExpiresAtMs,
            accessDeadline: now + tokens.accessRemainingMs,
            refreshDeadline: now + tokens.refreshRemainingMs,
        };
    }
    install(set) {
        // One assignment replaces access and refresh token together: the newest refresh token is the only one kept.
        this.current = set;
        this.failures = 0;
        this.metrics.tokenExpiries(set.accessExpiresAtMs, set.refreshExpiresAtMs);
        this.scheduleRefresh(set);
        return set;
    }
    scheduleRefresh(set) {
        const { refreshAheadMinSeconds: min, refreshAheadMaxSeconds: max } = this.options;
        const random = this.options.random ?? Math.random;
        const lifetimeMs = set.accessDeadline - this.mono();
        // Never more than half the lifetime ahead: a gateway issuing short-lived tokens must not be hammered.
        const aheadMs = Math.min((min + random() * (max - min)) * 1000, lifetimeMs / 2);
        const inMs = Math.max(0, lifetimeMs - aheadMs);
        this.arm(inMs);
    }
    scheduleRetry() {
        const delay = backoffDelayMs(this.failures++, this.options.backoffBaseMs ?? 500, this.options.backoffMaxMs, this.options.random);
        this.log.warn({ event: 'token.retry_scheduled', inMs: delay, failures: this.failures }, 'no new token; retrying with backoff');
        this.arm(delay);
    }
    arm(inMs) {
        clearTimeout(this.timer);
        if (this.stopped)
            return;
        // setTimeout runs on the monotonic clock: a wall-clock jump neither fires it early nor stalls it.
        this.timer = setTimeout(() => this.fetchInBackground(), inMs);
        this.timer.unref();
    }
}
