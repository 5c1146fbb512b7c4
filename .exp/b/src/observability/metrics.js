import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client';
import { GATEWAY_ERROR_CODES, METRIC_PREFIX, METRICS } from './metric-names.js';
// Buckets from 100 µs to 10 s: an RSA signature is ~0.2 ms, a gateway round trip tens of milliseconds,
// a stuck upstream seconds. Sub-millisecond resolution is what shows the sidecar's own cost.
const LATENCY_BUCKETS = [0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10];
const UNLINTABLE_DEFAULT_METRICS = ['nodejs_active_handles_total', 'nodejs_active_requests_total', 'nodejs_active_resources_total'];
/** Every metric of the public contract on the sidecar's own registry (never the global one). */
export class SidecarMetrics {
    registry = new Registry();
    requests = new Counter({
        name: METRICS.requests,
        help: 'Client requests answered, by route, status class and outcome code (ok, sidecar.* or gateway code).',
        labelNames: ['route', 'status_class', 'code'],
        registers: [this.registry],
    });
    gatewayErrors = new Counter({
        name: METRICS.gatewayErrors,
        help: 'Gateway error answers by gateway code (403 counted as ip.forbidden, unknown codes as other).',
        labelNames: ['code'],
        registers: [this.registry],
    });
    tokenRequests = new Counter({
        name: METRICS.tokenRequests,
        help: 'Calls to the token endpoint by grant and outcome.',
        labelNames: ['grant', 'outcome'],
        registers: [this.registry],
    });
    accessExpiry = this.gauge(METRICS.accessTokenExpiry, 'Unix time when the access token expires.');
    refreshExpiry = this.gauge(METRICS.refreshTokenExpiry, 'Unix time when the refresh token expires.');
    retries = new Counter({
        name: METRICS.retries,
        help: 'Requests sent again, by reason.',
        labelNames: ['reason'],
        registers: [this.registry],
    });
    signing = new Histogram({
        name: METRICS.signingDuration,
        help: 'Time to compute one RSA signature.',
        buckets: LATENCY_BUCKETS,
        registers: [this.registry],
    });
    gatewayLatency = this.histogram(METRICS.gatewayDuration, 'One gateway round trip (one attempt).');
    requestLatency = this.histogram(METRICS.requestDuration, 'Whole client request through the sidecar.');
    skew = this.gauge(METRICS.clockSkew, 'Gateway Date header minus local clock, in seconds.');
    isReady = () => false;
    // Computed at scrape time from the live state, so it can never lag behind what /readyz says.
    readyGauge = new Gauge({
        name: METRICS.ready,
        help: '1 when the sidecar is ready to serve (valid token, not draining).',
        registers: [this.registry],
        collect: () => this.readyGauge.set(this.isReady() ? 1 : 0),
    });
    inFlightGauge = this.gauge(METRICS.inFlight, 'Client requests in flight.');
    constructor(info) {
        collectDefaultMetrics({ register: this.registry, prefix: METRIC_PREFIX });
        // prom-client names these three gauges *_total, which promtool rejects ("non-counter metrics should not
        // have _total suffix") and which misleads rate(). The same numbers are sum() of the labelled gauges
        // (nodejs_active_handles{type} etc.), so nothing is lost by dropping them.
        for (const name of UNLINTABLE_DEFAULT_METRICS)
            this.registry.removeSingleMetric(METRIC_PREFIX + name);
        const build = new Gauge({
            name: METRICS.buildInfo,
            help: 'Build and key identity (the public key fingerprint, never the key).',
            labelNames: ['version', 'environment', 'key_fingerprint'],
            registers: [this.registry],
        });
        build.set({ version: info.version, environment: info.environment, key_fingerprint: info.keyFingerprint }, 1);
        // Created at zero so that rate() and alerts work before the first error happens.
        for (const code of GATEWAY_ERROR_CODES)
            this.gatewayErrors.inc({ code }, 0);
        for (const grant of ['password', 'refresh_token']) {
            for (const outcome of ['success', 'rejected', 'error'])
                this.tokenRequests.inc({ grant, outcome }, 0);
        }
        for (const reason of ['token_rejected', 'connect_failed'])
            this.retries.inc({ reason }, 0);
    }
    requestDone(route, status, code, seconds) {
        this.requests.inc({ route, status_class: `${Math.floor(status / 100)}xx`, code });
        this.requestLatency.observe({ route }, seconds);
    }
    gatewayError(code) {
        this.gatewayErrors.inc({ code });
    }
    tokenCall(grant, outcome) {
        this.tokenRequests.inc({ grant, outcome });
    }
    tokenExpiries(accessExpiresAtMs, refreshExpiresAtMs) {
        this.accessExpiry.set(accessExpiresAtMs / 1000);
        this.refreshExpiry.set(refreshExpiresAtMs / 1000);
    }
    retry(reason) {
        this.retries.inc({ reason });
    }
    signed(seconds) {
        this.signing.observe(seconds);
    }
    gatewayRoundTrip(route, seconds) {
        this.gatewayLatency.observe({ route }, seconds);
    }
    clockSkew(seconds) {
        this.skew.set(seconds);
    }
    trackReadiness(isReady) {
        this.isReady = isReady;
    }
    inFlight(delta) {
        this.inFlightGauge.inc(delta);
    }
    gauge(name, help) {
        return new Gauge({ name, help, registers: [this.registry] });
    }
    histogram(name, help) {
        return new Histogram({ name, help, labelNames: ['route'], buckets: LATENCY_BUCKETS, registers: [this.registry] });
    }
}
