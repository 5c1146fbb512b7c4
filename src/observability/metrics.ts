import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client';
import {
  CAUSE_FAMILIES,
  GATEWAY_ERROR_CODES,
  IDEMPOTENCY_OUTCOMES,
  METRIC_PREFIX,
  METRICS,
  type CauseFamily,
  type GatewayErrorCode,
  type IdempotencyOutcome,
} from './metric-names.js';
import { CountedSeries } from './counted-series.js';
import { MemoryMetrics } from './memory-metrics.js';
import { InboxMetrics, PostbackMetrics } from './postback-metrics.js';
import { LimitMetrics } from './limit-metrics.js';
import { StateStoreMetrics } from './state-store-metrics.js';

// Buckets from 100 µs to 10 s: an RSA signature is ~0.2 ms, a gateway round trip tens of milliseconds,
// a stuck upstream seconds. Sub-millisecond resolution is what shows the sidecar's own cost.
const LATENCY_BUCKETS = [
  0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10,
];

const UNLINTABLE_DEFAULT_METRICS = [
  'nodejs_active_handles_total',
  'nodejs_active_requests_total',
  'nodejs_active_resources_total',
];

/** The status_class label by the status's hundreds: made once rather than a template string per request. */
const STATUS_CLASSES: readonly string[] = ['0xx', '1xx', '2xx', '3xx', '4xx', '5xx'];

function perRoute(
  children: Map<string, Histogram.Internal<'route'>>,
  histogram: Histogram<'route'>,
  route: string,
): Histogram.Internal<'route'> {
  let child = children.get(route);
  if (child === undefined) children.set(route, (child = histogram.labels({ route })));
  return child;
}

export type TokenGrant = 'password' | 'refresh_token';
export type TokenCallOutcome = 'success' | 'rejected' | 'error';
export type RetryReason = 'token_rejected' | 'connect_failed';
export type ConfigReloadOutcome = 'success' | 'error';
const UPSTREAM_FAILURE_OUTCOMES = ['not_sent', 'sent_no_answer'] as const;
export type UpstreamFailureOutcome = (typeof UPSTREAM_FAILURE_OUTCOMES)[number];

/** State the sidecar already keeps, exported as gauges at scrape time. */
export interface LiveState {
  readonly isReady: () => boolean;
  readonly inFlight: () => number;
  /** The signer: its kind and whether it can sign now (signing_sidecar_signer_up). */
  readonly signer?: { readonly kind: SignerLabel; available(): boolean };
}

export type SignerLabel = 'file' | 'pkcs11';
export type SignatureOutcome = 'success' | 'failure';

export interface BuildInfo {
  readonly version: string;
  readonly environment: string;
  /** The key in use, when known; else build_info appears with the first signingKey(), once the signer is open. */
  readonly keyFingerprint?: string;
}

/** Every metric of the public contract on the sidecar's own registry (never the global one). */
export class SidecarMetrics {
  readonly registry = new Registry();
  /** The postback receiver's counters and delivery latency (postback-metrics.ts). */
  readonly postbacks = new PostbackMetrics(this.registry);
  /** Queued postback delivery: attempts by outcome, backlog, oldest age, dead letters (postback-metrics.ts). */
  readonly inbox = new InboxMetrics(this.registry);
  /** The shared state store: up, command latency, memory evictions (state-store-metrics.ts). */
  readonly stateStore = new StateStoreMetrics(this.registry);
  /** The memory budget, its pressure, and what the connection policy and the shedding refused (memory-metrics.ts). */
  readonly memory = new MemoryMetrics(this.registry);
  /** The money limits: refusals by rule and mode, each window's use (limit-metrics.ts). */
  readonly limits = new LimitMetrics(this.registry);
  private readonly requests: Counter<'route' | 'status_class' | 'code'> = new Counter({
    name: METRICS.requests,
    help: 'Client requests answered, by route, status class and outcome code (ok, sidecar.* or gateway code).',
    labelNames: ['route', 'status_class', 'code'] as const,
    registers: [this.registry],
    collect: (): void => this.requestCounts.flush(),
  });
  private readonly requestCounts = new CountedSeries(this.requests, ['route', 'status_class', 'code']);
  private readonly gatewayErrors = new Counter({
    name: METRICS.gatewayErrors,
    help: 'Gateway error answers by gateway code (403 counted as ip.forbidden, unknown codes as other).',
    labelNames: ['code'] as const,
    registers: [this.registry],
  });
  // Without labels, exported at zero from the start: increase() sees the first mismatch.
  private readonly answerMismatches = new Counter({
    name: METRICS.answerMismatches,
    help: "Gateway answers refused because a correlation field differed from the request's (each also an outcome_unknown).",
    registers: [this.registry],
  });
  private readonly tokenRequests = new Counter({
    name: METRICS.tokenRequests,
    help: 'Calls to the token endpoint by grant and outcome.',
    labelNames: ['grant', 'outcome'] as const,
    registers: [this.registry],
  });
  private readonly accessExpiry = this.gauge(METRICS.accessTokenExpiry, 'Unix time when the access token expires.');
  private readonly refreshExpiry = this.gauge(METRICS.refreshTokenExpiry, 'Unix time when the refresh token expires.');
  private readonly generation = this.gauge(
    METRICS.tokenGeneration,
    "Generation of the fleet's shared token record in use here (0: none, or the memory store).",
  );
  // Without labels, exported at zero from the start.
  private readonly lockWaits = new Histogram({
    name: METRICS.tokenLockWaits,
    help: "Time spent waiting for another replica's refresh or login instead of calling the token endpoint.",
    buckets: [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30],
    registers: [this.registry],
  });
  private readonly adopted = new Counter({
    name: METRICS.tokenAdopted,
    help: 'Token records written by another replica and taken into use without a call to the token endpoint.',
    registers: [this.registry],
  });
  private readonly storeFallbacks = new Counter({
    name: METRICS.tokenStoreFallbacks,
    help: 'Tokens this replica fetched on its own because the state store was unavailable.',
    registers: [this.registry],
  });
  private readonly retries = new Counter({
    name: METRICS.retries,
    help: 'Requests sent again, by reason.',
    labelNames: ['reason'] as const,
    registers: [this.registry],
  });
  // Without labels, prom-client exports this one at zero from the start.
  private readonly signing = new Histogram({
    name: METRICS.signingDuration,
    help: 'Time to compute one RSA signature, by signer (file or pkcs11).',
    labelNames: ['signer'] as const,
    buckets: LATENCY_BUCKETS,
    registers: [this.registry],
  });
  private readonly signatures: Counter<'signer' | 'outcome'> = new Counter({
    name: METRICS.signatures,
    help: 'Signatures asked of the signer, by signer (file or pkcs11) and outcome (success, failure: answered sidecar.signer.unavailable).',
    labelNames: ['signer', 'outcome'] as const,
    registers: [this.registry],
    collect: (): void => this.signatureCounts.flush(),
  });
  private readonly signatureCounts = new CountedSeries(this.signatures, ['signer', 'outcome']);
  /** The signing histogram's child per signer, made once (as the route histograms' below). */
  private readonly signingOf = new Map<SignerLabel, Histogram.Internal<'signer'>>();
  private readonly signerUpGauge: Gauge<'signer'> = new Gauge({
    name: METRICS.signerUp,
    help: '1 while a signature can be made: the key file always, a PKCS#11 token while it is open.',
    labelNames: ['signer'] as const,
    registers: [this.registry],
    collect: (): void => {
      const signer = this.live.signer;
      if (signer !== undefined) this.signerUpGauge.set({ signer: signer.kind }, signer.available() ? 1 : 0);
    },
  });
  private readonly gatewayLatency = this.histogram(METRICS.gatewayDuration, 'One gateway round trip (one attempt).');
  private readonly requestLatency = this.histogram(
    METRICS.requestDuration,
    'Whole client request through the sidecar.',
  );
  // Each route's histogram child, made once (routes are a short configured list): observing through prom-client's
  // labels() child spares the hot path a label object and a closure per observation.
  private readonly requestLatencyOf = new Map<string, Histogram.Internal<'route'>>();
  private readonly gatewayLatencyOf = new Map<string, Histogram.Internal<'route'>>();
  // Measured on every answer, read at scrape time: an answer pays for a number, not for prom-client's set().
  private latestSkewSeconds = 0;
  private readonly skew: Gauge = new Gauge({
    name: METRICS.clockSkew,
    help: 'Gateway Date header minus local clock, in seconds.',
    registers: [this.registry],
    collect: (): void => this.skew.set(this.latestSkewSeconds),
  });
  private readonly correction = this.gauge(
    METRICS.clockCorrection,
    'Seconds added to the local clock for X-Timestamp.',
  );
  private readonly correctionsRefused = new Counter({
    name: METRICS.clockCorrectionsRefused,
    help: 'Measured gateway clock offsets beyond the largest correction allowed, not applied.',
    registers: [this.registry],
  });
  private readonly configReloads = new Counter({
    name: METRICS.configReloads,
    help: 'Secret files read again after a change (or SIGHUP), by setting and outcome (error: the old value stays in use).',
    labelNames: ['setting', 'outcome'] as const,
    registers: [this.registry],
  });
  private readonly idempotencyOutcomes = new Counter({
    name: METRICS.idempotency,
    help: 'Signed requests by what their Idempotency-Key did (new, replayed, in_progress, key_reused, abandoned, unavailable, key_invalid, key_required).',
    labelNames: ['outcome'] as const,
    registers: [this.registry],
  });
  private readonly build: Gauge<'version' | 'environment' | 'key_fingerprint'>;
  private readonly info: BuildInfo;
  private live: LiveState = { isReady: () => false, inFlight: () => 0 };
  // Both are read from the live state at scrape time: they can never lag behind what /readyz and the server
  // see, and the hot path pays nothing to keep them.
  private readonly readyGauge: Gauge = new Gauge({
    name: METRICS.ready,
    help: '1 when /readyz answers 200: serving, not draining (and a valid token if SIDECAR_READINESS_REQUIRES_TOKEN).',
    registers: [this.registry],
    collect: (): void => this.readyGauge.set(this.live.isReady() ? 1 : 0),
  });
  private readonly inFlightGauge: Gauge = new Gauge({
    name: METRICS.inFlight,
    help: 'Client requests in flight.',
    registers: [this.registry],
    collect: (): void => this.inFlightGauge.set(this.live.inFlight()),
  });

  private readonly upstreamFailures = new Counter({
    name: METRICS.upstreamFailures,
    help: 'Failed sends to the gateway (every attempt), by the hop that failed (proxy: the forward proxy, gateway, sidecar) and whether any byte was sent.',
    labelNames: ['cause_family', 'outcome'] as const,
    registers: [this.registry],
  });

  constructor(info: BuildInfo) {
    collectDefaultMetrics({ register: this.registry, prefix: METRIC_PREFIX });
    // prom-client names these three gauges *_total, which promtool rejects ("non-counter metrics should not
    // have _total suffix") and which misleads rate(). The same numbers are sum() of the labelled gauges
    // (nodejs_active_handles{type} etc.), so nothing is lost by dropping them.
    for (const name of UNLINTABLE_DEFAULT_METRICS) this.registry.removeSingleMetric(METRIC_PREFIX + name);
    this.info = info;
    this.build = new Gauge({
      name: METRICS.buildInfo,
      help: 'Build and key identity (the public key fingerprint in use, never the key).',
      labelNames: ['version', 'environment', 'key_fingerprint'] as const,
      registers: [this.registry],
    });
    if (info.keyFingerprint !== undefined) this.signingKey(info.keyFingerprint);
    // Created at zero so that rate() and alerts work before the first error happens.
    for (const code of GATEWAY_ERROR_CODES) this.gatewayErrors.inc({ code }, 0);
    for (const grant of ['password', 'refresh_token'] as const) {
      for (const outcome of ['success', 'rejected', 'error'] as const) this.tokenRequests.inc({ grant, outcome }, 0);
    }
    for (const reason of ['token_rejected', 'connect_failed'] as const) this.retries.inc({ reason }, 0);
    for (const outcome of IDEMPOTENCY_OUTCOMES) this.idempotencyOutcomes.inc({ outcome }, 0);
    for (const cause_family of CAUSE_FAMILIES) {
      for (const outcome of UPSTREAM_FAILURE_OUTCOMES) this.upstreamFailures.inc({ cause_family, outcome }, 0);
    }
  }

  /** One send that failed: which hop, and whether the gateway may have got it. */
  upstreamFailure(family: CauseFamily, outcome: UpstreamFailureOutcome): void {
    this.upstreamFailures.inc({ cause_family: family, outcome });
  }

  /**
   * The failures that alerts fire on from their first occurrence are created at zero per route: increase()
   * over a series that appears at 1 is 0, so a single outcome_unknown would otherwise never alert.
   */
  initRoutes(routes: readonly string[]): void {
    const alerted = [
      'sidecar.upstream.outcome_unknown',
      'sidecar.upstream.unreachable',
      'sidecar.token.unavailable',
      'sidecar.internal',
    ];
    for (const route of routes) for (const code of alerted) this.requests.inc({ route, status_class: '5xx', code }, 0);
  }

  /** Creates the reload series of the watched settings at zero, so that the alert sees the first error. */
  initConfigReloads(settings: readonly string[]): void {
    for (const setting of settings) {
      for (const outcome of ['success', 'error'] as const) this.configReloads.inc({ setting, outcome }, 0);
    }
  }

  configReload(setting: string, outcome: ConfigReloadOutcome): void {
    this.configReloads.inc({ setting, outcome });
  }

  /** The key in use: build_info keeps one series, so /metrics never shows the fingerprint of a retired key. */
  signingKey(keyFingerprint: string): void {
    this.build.reset();
    this.build.set(
      { version: this.info.version, environment: this.info.environment, key_fingerprint: keyFingerprint },
      1,
    );
  }

  requestDone(route: string, status: number, code: string, seconds: number): void {
    const hundreds = Math.floor(status / 100);
    this.requestCounts.inc(route, STATUS_CLASSES[hundreds] ?? `${hundreds}xx`, code);
    perRoute(this.requestLatencyOf, this.requestLatency, route).observe(seconds);
  }

  gatewayError(code: GatewayErrorCode): void {
    this.gatewayErrors.inc({ code });
  }

  answerMismatch(): void {
    this.answerMismatches.inc();
  }

  tokenCall(grant: TokenGrant, outcome: TokenCallOutcome): void {
    this.tokenRequests.inc({ grant, outcome });
  }

  tokenExpiries(accessExpiresAtMs: number, refreshExpiresAtMs: number): void {
    this.accessExpiry.set(accessExpiresAtMs / 1000);
    this.refreshExpiry.set(refreshExpiresAtMs / 1000);
  }

  idempotency(outcome: IdempotencyOutcome): void {
    this.idempotencyOutcomes.inc({ outcome });
  }

  tokenGeneration(generation: number): void {
    this.generation.set(generation);
  }

  tokenLockWait(seconds: number): void {
    this.lockWaits.observe(seconds);
  }

  tokenAdopted(): void {
    this.adopted.inc();
  }

  tokenStoreFallback(): void {
    this.storeFallbacks.inc();
  }

  retry(reason: RetryReason): void {
    this.retries.inc({ reason });
  }

  /** The signer's series at zero from the start, so that an alert sees its first failure. */
  initSigner(signer: SignerLabel): void {
    this.signing.zero({ signer });
    for (const outcome of ['success', 'failure'] as const) this.signatures.inc({ signer, outcome }, 0);
  }

  signed(signer: SignerLabel, outcome: SignatureOutcome, seconds: number): void {
    this.signatureCounts.inc(signer, outcome);
    let child = this.signingOf.get(signer);
    if (child === undefined) this.signingOf.set(signer, (child = this.signing.labels({ signer })));
    child.observe(seconds);
  }

  gatewayRoundTrip(route: string, seconds: number): void {
    perRoute(this.gatewayLatencyOf, this.gatewayLatency, route).observe(seconds);
  }

  clockSkew(seconds: number): void {
    this.latestSkewSeconds = seconds;
  }

  clockCorrection(seconds: number): void {
    this.correction.set(seconds);
  }

  clockCorrectionRefused(): void {
    this.correctionsRefused.inc();
  }

  trackLiveState(live: LiveState): void {
    this.live = live;
  }

  private gauge(name: string, help: string): Gauge {
    return new Gauge({ name, help, registers: [this.registry] });
  }

  /** A per-route latency histogram; a route's series appears with its first observation. */
  private histogram(name: string, help: string): Histogram<'route'> {
    return new Histogram({
      name,
      help,
      labelNames: ['route'] as const,
      buckets: LATENCY_BUCKETS,
      registers: [this.registry],
    });
  }
}
