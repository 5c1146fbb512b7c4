import type { DestinationStream } from 'pino';
import type { Config } from './config/config.js';
import type { ReloadReport } from './config/secret-watch.js';
import { MemoryPressure } from './memory/pressure.js';
import { createLogger, type Logger } from './observability/log.js';
import { SidecarMetrics } from './observability/metrics.js';
import { NO_TRACING, type Tracing } from './observability/tracing.js';
import { createSecretRotation } from './start/secret-rotation.js';
import { createShutdown, flushTraces } from './start/shutdown.js';
import { createAdmin } from './start/admin.js';
import { createEgress } from './start/egress.js';
import { openLimits } from './start/limits.js';
import { createPostbacks } from './start/postbacks.js';
import { openSigning, type Signing } from './start/signing.js';
import { StartedParts } from './start/started-parts.js';
import { openState } from './start/state.js';
import { createTokens } from './start/tokens.js';
import type { StateStore } from './state/state-store.js';
import type { TokenManager } from './token/token-manager.js';
import { packageVersion } from './observability/package-version.js';

export interface SidecarDeps {
  /** Where JSON log lines go (stdout by default); tests capture every byte here. */
  readonly logDestination?: DestinationStream;
  /** Shifts the wall clock used for X-Timestamp and idempotency deadlines (tests of the timestamp window). */
  readonly now?: () => number;
  /** Wraps the state store the settings open (tests: a store that becomes unavailable on demand). */
  readonly wrapStore?: (store: StateStore) => StateStore;
}

export interface RunningSidecar {
  readonly egressUrl: string;
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

/**
 * Builds the sidecar from a Config and starts its listeners. Top to bottom in dependency order: each subsystem's
 * builder (src/start/) takes what it needs as values and returns what it owns and how to stop it. A start that fails
 * half-way stops what it had started (listeners, the store, timers), last first, and rejects with the error.
 */
export async function startSidecar(config: Config, deps: SidecarDeps = {}): Promise<RunningSidecar> {
  const now = deps.now ?? Date.now;
  const log = createLogger(config.logLevel, deps.logDestination);
  // Allowed but risky settings (a non-loopback listen host, docs/configuration.md): loud at start.
  for (const warning of config.warnings) {
    log.warn({ event: 'config.warning', setting: warning.setting }, warning.message);
  }
  // build_info gets its key fingerprint once the signer is open.
  const metrics = new SidecarMetrics({ version: packageVersion(), environment: config.environment });
  metrics.initRoutes(config.signedRoutes);
  const started = new StartedParts();
  try {
    // Before anything listens: a PKCS#11 token that refuses (PIN, key, module) stops the start naming the setting.
    const signing = await openSigning(config, { metrics, log });
    started.add(() => signing.stop());
    const { signer, clock } = signing;
    const tracing = await tracingFor(config);
    started.add(() => flushTraces(tracing));
    const pressure = memoryPressure(config, metrics, log);
    const overloaded = () => pressure.overloaded;
    const state = await openState(config, { metrics, log, wrapStore: deps.wrapStore });
    started.add(() => state.close());
    const { store, epoch } = state;
    const tokens = createTokens(config, { store, clock, epoch, metrics, log, now, tracing });
    started.add(() => tokens.close());
    const { gatewayClient, manager } = tokens;
    const postbacks = await createPostbacks(config, {
      store,
      redis: state.redis,
      epoch,
      metrics,
      log,
      now,
      tracing,
      overloaded,
    });
    if (postbacks !== undefined) {
      started.add(async () => {
        await postbacks.close(0);
        postbacks.stop();
      });
    }
    const opened = openLimits(config, { store, metrics, log, now });
    const limits = opened?.guard;
    const secrets = createSecretRotation(
      config,
      signing.fingerprint,
      { signer, password: tokens.password, gatewayClient, postbacks, recordMac: state.recordMac, limits: opened },
      metrics,
      log,
    );
    started.add(() => secrets.stop());
    const egress = createEgress(config, {
      signer,
      clock,
      tokens: manager,
      gatewayClient,
      store,
      limits,
      metrics,
      log,
      tracing,
      now,
      overloaded,
    });
    started.add(() => egress.close());
    const egressUrl = await egress.listen();
    const admin = createAdmin(config, { egress, egressUrl, signer, tokens: manager, metrics, overloaded, limits });
    started.add(() => admin.close());
    const { shutdown, stopped } = createShutdown({
      egress: egress.server,
      admin: admin.server,
      tracker: egress.tracker,
      tokens: manager,
      gatewayClient,
      store,
      postbacks,
      tracing,
      log,
      drainDelayMs: config.shutdown.drainDelayMs,
      maxDelayMs: config.shutdown.maxDelayMs,
      beginDraining: egress.beginDraining,
    });
    admin.onQuit(() => void shutdown('quitquitquit'));
    metrics.trackLiveState({ isReady: admin.isReady, inFlight: () => egress.tracker.active, signer });
    const adminUrl = await admin.listen();
    const postbackUrl = await postbacks?.start();
    pressure.start();
    started.add(() => pressure.stop());
    manager.start();
    await secrets.start();
    logStart(log, config, { egressUrl, adminUrl, postbackUrl }, signing, store, tracing);
    // What shutdown (shutdown.ts) leaves running: the timers, once everything they could act on is closed.
    void stopped.then(() => {
      secrets.stop();
      pressure.stop();
      state.stop();
      postbacks?.stop();
      signing.stop();
    });
    const reload = () => secrets.reloadNow();
    return {
      egressUrl,
      adminUrl,
      postbackUrl,
      metrics,
      tokens: manager,
      store,
      log,
      isReady: admin.isReady,
      reload,
      shutdown,
      stopped,
    };
  } catch (err) {
    await started.stopAll();
    throw err;
  }
}

/** The one line that says the sidecar runs, and with what. */
function logStart(
  log: Logger,
  config: Config,
  urls: { readonly egressUrl: string; readonly adminUrl: string; readonly postbackUrl: string | undefined },
  { signer, fingerprint }: Signing,
  store: StateStore,
  tracing: Tracing,
): void {
  log.info(
    {
      event: 'start',
      proxyUrl: urls.egressUrl,
      adminUrl: urls.adminUrl,
      postbackUrl: urls.postbackUrl,
      baseUrl: `${config.base.origin}${config.base.pathPrefix}`,
      // Where gateway connections go first (never a credential: the forward proxy's URL carries none).
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
}

/** Past the memory budget's high-water mark every listener sheds new work (memory/pressure.ts); not sampling yet. */
function memoryPressure(config: Config, metrics: SidecarMetrics, log: Logger): MemoryPressure {
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
  return pressure;
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
