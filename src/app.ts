import type { DestinationStream } from 'pino';
import type { Config } from './config/config.js';
import type { PostbackConfig } from './config/postback-settings.js';
import { BodyBudget } from './inbound/body-budget.js';
import { createPolicyServer, type ConnectionPolicy } from './inbound/connection-policy.js';
import { EGRESS_FREE_BODY_BYTES } from './memory/budget.js';
import { MemoryPressure } from './memory/pressure.js';
import { InFlightRequests } from './inbound/in-flight.js';
import { listen } from './inbound/listener.js';
import { createAdminServer } from './observability/health.js';
import { openApiDocument, openApiInputs } from './observability/openapi.js';
import { createLogger, type Logger } from './observability/log.js';
import { SidecarMetrics } from './observability/metrics.js';
import { NO_TRACING, type Tracing } from './observability/tracing.js';
import { createCallerCheck } from './egress/caller-check.js';
import { exchangeEvents } from './egress/exchange-events.js';
import { createEgressHandler } from './egress/handler.js';
import { requestDeadlineMs } from './egress/request-deadline.js';
import { requestSigning } from './egress/request-signing.js';
import type { EgressRequest } from './egress/request.js';
import { createRouter } from './egress/routes.js';
import { ClockCorrection } from './signing/clock-correction.js';
import { publicKeyFingerprint } from './signing/keys.js';
import { createSigner, type SwappableSigner } from './signing/signer.js';
import type { Pkcs11Signer } from './signing/pkcs11-signer.js';
import { createSecretRotation, PasswordHolder } from './secret-rotation.js';
import type { ReloadReport } from './config/secret-watch.js';
import { createTokenClient } from './token/token-client.js';
import { TokenManager } from './token/token-manager.js';
import { fleetTokenFor, type FleetToken } from './token/fleet-token.js';
import { createGatewayClient, type GatewayClient } from './upstream/gateway-client.js';
import { createShutdown } from './shutdown.js';
import { keeperFromConfig } from './idempotency/from-config.js';
import { openStateStore } from './state/open-store.js';
import type { RedisStateStore } from './state/redis-store.js';
import type { StateStore } from './state/state-store.js';
import type { PostbackInbox } from './postback/inbox.js';
import type { PostbackDelivery } from './postback/receiver.js';
import type { RequeueMemory } from './postback/requeue-memory.js';
import { StoreEpoch } from './state/store-epoch.js';
import { packageVersion } from './version.js';

/**
 * The egress listener serves local callers only (docs/operations.md, "Connections"). A caller gets 10 s to send its
 * headers and 60 s for the whole request (a body trickling in slower is cut); an idle keep-alive connection is
 * closed after 5 s. The answer itself may take as long as the gateway does (SIDECAR_UPSTREAM_RESPONSE_TIMEOUT_MS):
 * no idle cut applies to it here. More open connections than a pod's services need are refused rather than piling
 * up; every caller comes from the pod's own address, so the one source may hold them all.
 */
const EGRESS_CONNECTIONS: ConnectionPolicy = {
  maxConnections: 1_024,
  maxConnectionsPerSource: 1_024,
  // Node's default header limit.
  maxHeaderBytes: 16 * 1024,
  headersTimeoutMs: 10_000,
  requestTimeoutMs: 60_000,
  keepAliveTimeoutMs: 5_000,
  idleTimeoutMs: 0,
  // How often Node checks the two timeouts above (its default, 30 s, would let a stalled caller hold on 40 s).
  checkIntervalMs: 1_000,
};

export interface SidecarDeps {
  /** Where JSON log lines go (stdout by default); tests capture every byte here. */
  readonly logDestination?: DestinationStream;
  /** Shifts the wall clock used for X-Timestamp and idempotency deadlines (tests of the timestamp window). */
  readonly now?: () => number;
  /** Wraps the state store the settings open (tests: a store that becomes unavailable on demand). */
  readonly wrapStore?: (store: StateStore) => StateStore;
}

export interface RunningSidecar {
  readonly proxyUrl: string;
  readonly adminUrl: string;
  /** The postback receiver's listener (docs/postbacks.md); undefined when SIDECAR_POSTBACK_FORWARD_URL is not set. */
  readonly postbackUrl: string | undefined;
  readonly metrics: SidecarMetrics;
  readonly tokens: TokenManager;
  /** The shared memory (token record, postback nonces, idempotency keys): in memory or on Redis. */
  readonly store: StateStore;
  readonly log: Logger;
  isReady(): boolean;
  /** Reads the secret files now (SIGHUP), as their polling does; resolves with what happened to each. */
  reload(): Promise<ReloadReport[]>;
  /** Graceful stop: readiness false, keep serving for the drain delay, finish in-flight work, close. */
  shutdown(reason: string): Promise<void>;
  /** Resolves once a shutdown (from a signal or /quitquitquit) has completed. */
  readonly stopped: Promise<void>;
}

/** Builds every component from a Config and starts both listeners. */
export async function startSidecar(config: Config, deps: SidecarDeps = {}): Promise<RunningSidecar> {
  const log = createLogger(config.logLevel, deps.logDestination);
  // Allowed but risky settings (a non-loopback listen host, docs/configuration.md): loud at start.
  for (const warning of config.warnings) {
    log.warn({ event: 'config.warning', setting: warning.setting }, warning.message);
  }
  // The PKCS#11 token is opened here, before anything listens: a token that refuses (PIN, key, module) stops the
  // start with the line that names the setting. Its later events only fire once `metrics` exists.
  const signer = await signerFor(config, log, (next) => metrics.signingKey(next));
  const fingerprint = publicKeyFingerprint(signer.kind === 'file' ? signer.currentKey() : signer.key.publicKey);
  const metrics = new SidecarMetrics({
    version: packageVersion(),
    environment: config.environment,
    keyFingerprint: fingerprint,
  });
  metrics.initRoutes(config.signedRoutes);
  metrics.initSigner(signer.kind);
  const tracing = await tracingFor(config);
  // Past the budget's high-water mark every listener sheds new work (memory/pressure.ts).
  const pressure = new MemoryPressure(config.memory, (overloaded, reading) =>
    log.warn(
      {
        event: overloaded ? 'memory.shedding' : 'memory.recovered',
        rssBytes: reading.rssBytes,
        heapUsedBytes: reading.heapUsedBytes,
      },
      overloaded
        ? 'near the memory limit: new requests are refused (503) until memory is back under the low-water mark'
        : 'memory back under the low-water mark: new requests are taken again',
    ),
  );
  metrics.memory.track(config.memory, pressure);
  const overloaded = () => pressure.overloaded;
  const opened = await openStateStore(config, { metrics: metrics.stateStore, log });
  const store = deps.wrapStore ? deps.wrapStore(opened) : opened;
  // The MAC on every record in Redis is the store's own (rotated with the key file).
  const recordMac = opened.kind === 'redis' ? (opened as RedisStateStore).mac : undefined;
  // Redis only: a Redis that comes back empty or older is noticed, and what this replica still holds shared again.
  // On the store as opened: its generation is raised by a script of its own, which no test wrapper passes on.
  const epoch =
    opened.kind === 'redis'
      ? new StoreEpoch(opened as RedisStateStore, { log, onWiped: () => metrics.stateStore.wiped() })
      : undefined;
  epoch?.start();
  const clock = new ClockCorrection(config.clock, metrics);
  // Every gateway answer's Date header is measured, token grants' too: the first payment after start is already
  // signed with the corrected time. Every failed send is counted by the hop that failed (the gateway, or the forward
  // proxy in front of it).
  const gatewayClient = createGatewayClient(config.base, config.upstream, {
    onAnswer: (answer) => clock.observe(answer.headers.date, Date.now()),
    onFailure: (failure) => metrics.upstreamFailure(failure.hop, failure.kind),
    tracing,
  });
  const password = new PasswordHolder(config.password);
  const fleet = fleetTokenFor(store, clock, metrics, log, {
    connectTimeoutMs: config.upstream.connectTimeoutMs,
    responseTimeoutMs: config.upstream.responseTimeoutMs,
    now: deps.now ?? Date.now,
    wipes: epoch,
  });
  const tokens = createTokenManager(
    config,
    password,
    gatewayClient,
    metrics,
    log,
    deps.now ?? Date.now,
    fleet,
    tracing,
  );
  // Its own listener, connection cap and timeouts: readiness and the egress path do not depend on it.
  // Loaded only when the receiver is on: a pod that receives no postbacks does not carry its code.
  const delivery =
    config.postback === undefined ? undefined : await postbackDelivery(config.postback, opened, epoch, metrics, log);
  const postbacks =
    config.postback && delivery
      ? (await import('./postback/receiver.js')).createPostbackReceiver(config.postback, {
          store,
          delivery: delivery.sink,
          metrics: metrics.postbacks,
          log,
          nowMs: deps.now ?? Date.now,
          storeCommandTimeoutMs: config.state.redis?.commandTimeoutMs ?? 0,
          bodyPoolBytes: config.memory.postbackBodyPoolBytes,
          overloaded,
          onShed: () => metrics.memory.requestShed('postback'),
          onRefused: (reason) => metrics.memory.connectionRefused('postback', reason),
          tracing,
          continueSenderTrace: config.tracing.propagateUpstream,
        })
      : undefined;
  const secrets = createSecretRotation(
    config,
    fingerprint,
    { signer, password, gatewayClient, postbacks, recordMac },
    metrics,
    log,
  );
  const tracker = new InFlightRequests<EgressRequest>();
  // From shutdown's first step on: readiness is false and every answer asks its client to close the connection.
  let draining = false;
  const now = deps.now ?? Date.now;
  // From the token wait the manager really has and the connection settings: the longest a request's work may take.
  const requestDeadline = requestDeadlineMs({ ...config.upstream, tokenWaitMs: tokens.waitForTokenMs });
  const handle = createEgressHandler({
    gateway: {
      tokens,
      gatewayClient,
      sign: requestSigning({
        base: config.base,
        signer,
        clock,
        metrics,
        now,
        tracing,
        propagateUpstream: config.tracing.propagateUpstream,
      }),
      events: exchangeEvents({ metrics, tracing, clock, now }),
      connectRetryDeadlineMs: config.upstream.connectRetryDeadlineMs,
    },
    metrics,
    log,
    route: createRouter(config.signedRoutes),
    maxBodyBytes: config.maxBodyBytes,
    checkCaller: createCallerCheck({ listenHost: config.listen.host, allowedHosts: config.listen.allowedHosts }),
    forwardedRequestHeaders: new Set(config.forwardedRequestHeaders),
    bodyBudget: new BodyBudget({ freeBytes: EGRESS_FREE_BODY_BYTES, poolBytes: config.memory.egressBodyPoolBytes }),
    answerCorrelationFields: config.upstream.answerCorrelationFields,
    idempotency: {
      keeper: keeperFromConfig(config, requestDeadline, store, log, now),
      required: config.idempotency.required,
    },
    requestDeadlineMs: requestDeadline,
    draining: () => draining,
    overloaded,
    tracing,
  });
  const proxy = createPolicyServer(
    EGRESS_CONNECTIONS,
    { onRefused: (reason) => metrics.memory.connectionRefused('egress', reason) },
    {
      request: (req, res) => tracker.track(handle(req, res)),
      // Refused like any other request (logged, counted, with its code), rather than with Node's bare 417.
      unmetExpectation: (req, res) => tracker.track(handle(req, res, 'unmet')),
    },
  );
  // A native sidecar's readiness is the whole pod's (docs/operations.md, "Readiness and the access token"): ready
  // means serving (listening, not draining) unless SIDECAR_READINESS_REQUIRES_TOKEN=true also asks for a valid
  // token. Startup never waits for a token: Kubernetes answers a failed startup probe with a restart, which would
  // not bring the gateway back, and the application behind it would never start.
  const readinessRequiresToken = config.admin.readinessRequiresToken;
  let started = false;
  const isStarted = () => (started ||= proxy.listening);
  const serving = () => isStarted() && proxy.listening && !draining;
  // No signature can be made while the PKCS#11 token is down: the pod leaves its Service until it is back.
  const isReady = () => serving() && signer.available() && (!readinessRequiresToken || tokens.hasValidToken());
  const { shutdown, stopped } = createShutdown({
    proxy,
    admin: () => admin,
    tracker,
    tokens,
    gatewayClient,
    store,
    postbacks,
    tracing,
    log,
    drainDelayMs: config.shutdown.drainDelayMs,
    maxDelayMs: config.shutdown.maxDelayMs,
    beginDraining: () => {
      draining = true;
    },
  });
  metrics.trackLiveState({ isReady, inFlight: () => tracker.active, signer });
  const admin = createAdminServer({
    registry: metrics.registry,
    health: {
      started: isStarted,
      ready: isReady,
      serving,
      token: () => {
        const held = tokens.usableToken();
        if (!held) return { valid: false };
        return { valid: true, accessExpiresAtMs: held.accessExpiresAtMs, refreshExpiresAtMs: held.refreshExpiresAtMs };
      },
    },
    readinessRequiresToken,
    openApiJson: () => (openApiJson ??= JSON.stringify(openApiDocument(openApiInputs(config, proxyUrl)))),
    ...(config.shutdown.quitEndpoint ? { onQuit: () => void shutdown('quitquitquit') } : {}),
    overloaded,
    onShed: () => metrics.memory.requestShed('admin'),
    onRefused: (reason) => metrics.memory.connectionRefused('admin', reason),
  });
  // Made at the first GET /openapi.json, once the listener's address (its port may be 0) is known.
  let openApiJson: string | undefined;
  const proxyUrl = await listen(proxy, config.listen.host, config.listen.port);
  const adminUrl = await listen(admin, config.admin.host, config.admin.port);
  const postbackUrl = await postbacks?.start();
  delivery?.requeue?.start();
  pressure.start();
  tokens.start();
  await secrets.start();
  log.info(
    {
      event: 'start',
      proxyUrl,
      adminUrl,
      postbackUrl,
      baseUrl: `${config.base.origin}${config.base.pathPrefix}`,
      // Where gateway connections go first (never a credential: the proxy URL carries none).
      upstreamProxy: config.upstream.proxy?.origin ?? 'none',
      environment: config.environment,
      keyFingerprint: fingerprint,
      signer: signer.kind,
      ...(signer.kind === 'pkcs11'
        ? {
            pkcs11: {
              token: signer.tokenLabel,
              keyLabel: signer.key.label,
              keyId: signer.key.id,
              mechanism: signer.mechanism,
            },
          }
        : {}),
      stateStore: store.kind,
      tracing: tracing.enabled,
    },
    'signing-sidecar started',
  );
  void stopped.then(() => {
    secrets.stop();
    pressure.stop();
    epoch?.stop();
    delivery?.requeue?.stop();
    if (signer.kind === 'pkcs11') signer.stop();
  });
  const reload = () => secrets.reloadNow();
  return { proxyUrl, adminUrl, postbackUrl, metrics, tokens, store, log, isReady, reload, shutdown, stopped };
}

/**
 * The signer the settings ask for: the key file's (crypto.sign on libuv's threads), or the PKCS#11 token's, opened
 * now (rejects a ConfigError naming the setting it refuses). The token's outages are logged: its reason is a CKR_*
 * name, never anything the module wrote.
 */
async function signerFor(
  config: Config,
  log: Logger,
  onKey: (fingerprint: string) => void,
): Promise<SwappableSigner | Pkcs11Signer> {
  if (config.signer.kind === 'file') return createSigner(config.signer.privateKey);
  // Loaded only for this signer: a pod signing with its key file does not carry the PKCS#11 code.
  const [{ startPkcs11Signer }, { loadPkcs11Binding }] = await Promise.all([
    import('./signing/pkcs11-signer.js'),
    import('./signing/pkcs11-binding.js'),
  ]);
  return startPkcs11Signer(
    config.signer,
    {
      onDown: (reason) =>
        log.error(
          { event: 'signer.down', signer: 'pkcs11', reason },
          'the PKCS#11 token failed a signature: requests are answered 503 sidecar.signer.unavailable (nothing sent) until it is open again',
        ),
      onReopenFailed: (reason) =>
        log.error(
          { event: 'signer.reopen_failed', signer: 'pkcs11', reason },
          'the PKCS#11 token cannot be opened yet; retrying with backoff',
        ),
      onUp: (keyFingerprint) => {
        onKey(keyFingerprint);
        log.info(
          { event: 'signer.up', signer: 'pkcs11', keyFingerprint },
          'the PKCS#11 token is open again: signing resumed',
        );
      },
    },
    loadPkcs11Binding(),
  );
}

/**
 * Where verified postbacks go, chosen once from SIDECAR_POSTBACK_DELIVERY: `direct`, forwarded at once; `queued`,
 * kept in the inbox on Redis. With a requeue memory (SIDECAR_POSTBACK_REQUEUE_MEMORY_MB), what this replica accepts
 * is also held until delivered and appended again if Redis loses it (docs/fleet.md). Loaded only when on.
 */
async function postbackDelivery(
  config: PostbackConfig,
  store: StateStore,
  epoch: StoreEpoch | undefined,
  metrics: SidecarMetrics,
  log: Logger,
): Promise<{ readonly sink: PostbackDelivery; readonly requeue?: RequeueMemory }> {
  if (config.delivery === 'direct') return { sink: { kind: 'direct' } };
  // The settings refuse `queued` without SIDECAR_STATE_STORE=redis (postback-settings.ts): this is a Redis store.
  if (store.kind !== 'redis') throw new Error('queued postback delivery needs the Redis state store');
  const redis = store as RedisStateStore;
  const inbox = (await import('./postback/inbox.js')).createRedisInbox(redis);
  const queued = (kept: PostbackInbox) => ({ kind: 'queued', inbox: kept, metrics: metrics.inbox }) as const;
  if (epoch === undefined || config.requeueMemoryMb === 0) return { sink: queued(inbox) };
  const { RequeueMemory } = await import('./postback/requeue-memory.js');
  const maxBytes = config.requeueMemoryMb * 1024 * 1024;
  const requeue = new RequeueMemory(inbox, redis, epoch, { maxBytes, metrics: metrics.inbox, log });
  return { sink: queued(requeue.wrap()), requeue };
}

function createTokenManager(
  config: Config,
  password: PasswordHolder,
  gatewayClient: GatewayClient,
  metrics: SidecarMetrics,
  log: Logger,
  now: () => number,
  fleet: FleetToken | undefined,
  tracing: Tracing,
): TokenManager {
  const client = createTokenClient(gatewayClient, {
    base: config.base,
    username: config.username,
    password: () => password.current(),
    refreshTokenField: config.token.refreshTokenField,
    now,
  });
  const options = {
    ...config.token,
    backoffMaxMs: config.token.loginBackoffMaxMs,
    tracing,
    ...(fleet ? { fleet } : {}),
  };
  return new TokenManager(client, options, metrics, log);
}

/**
 * The OpenTelemetry tracing when the environment asks for it (docs/operations.md#tracing), else NO_TRACING. A dynamic
 * import: a sidecar that exports no traces never loads the SDK nor the exporter.
 */
async function tracingFor(config: Config): Promise<Tracing> {
  if (!config.tracing.enabled) return NO_TRACING;
  const { createOtelTracing } = await import('./observability/otel-tracing.js');
  return createOtelTracing(packageVersion());
}
