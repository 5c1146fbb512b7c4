import { createServer } from 'node:http';
import type { DestinationStream } from 'pino';
import type { Config } from './config/config.js';
import { closeServer, ConnectionTracker, listen, sleep } from './lifecycle.js';
import { createAdminServer } from './observability/health.js';
import { createLogger, createRequestLogger, type Logger } from './observability/log.js';
import { SidecarMetrics } from './observability/metrics.js';
import { sidecarErrors } from './errors.js';
import { createProxyHandler, writeSidecarError } from './proxy/handler.js';
import { createRouter } from './proxy/routes.js';
import { publicKeyFingerprint } from './signing/keys.js';
import { createSigner } from './signing/signer.js';
import { createTokenClient } from './token/token-client.js';
import { TokenManager } from './token/token-manager.js';
import { createForwarder } from './upstream/forwarder.js';
import { packageVersion } from './version.js';

export interface SidecarDeps {
  /** Where JSON log lines go (stdout by default); tests capture every byte here. */
  readonly logDestination?: DestinationStream;
  /** Shifts the clock used for X-Timestamp (tests of the timestamp window). */
  readonly now?: () => number;
}

export interface RunningSidecar {
  readonly proxyUrl: string;
  readonly adminUrl: string;
  readonly metrics: SidecarMetrics;
  readonly tokens: TokenManager;
  readonly log: Logger;
  isReady(): boolean;
  /** Graceful stop: readiness false, keep serving for the drain delay, finish in-flight work, close. */
  shutdown(reason: string): Promise<void>;
  /** Resolves once a shutdown (from a signal or /quitquitquit) has completed. */
  readonly stopped: Promise<void>;
}

/** Builds every component from a Config and starts both listeners. */
export async function startSidecar(config: Config, deps: SidecarDeps = {}): Promise<RunningSidecar> {
  const log = createLogger(config.logLevel, deps.logDestination);
  const fingerprint = publicKeyFingerprint(config.privateKey);
  const metrics = new SidecarMetrics({ version: packageVersion(), environment: config.environment, keyFingerprint: fingerprint });
  metrics.initRoutes(config.signedRoutes);
  const forwarder = createForwarder(config.base, config.upstream);
  const tokenClient = createTokenClient(forwarder, {
    base: config.base,
    username: config.username,
    password: config.password,
    refreshTokenField: config.token.refreshTokenField,
    now: deps.now ?? Date.now,
  });
  const tokens = new TokenManager(
    tokenClient,
    { ...config.token, backoffMaxMs: config.token.loginBackoffMaxMs },
    metrics,
    log,
  );
  const proxy = createServer(
    createProxyHandler({
      base: config.base,
      signer: createSigner(config.privateKey),
      tokens,
      forwarder,
      metrics,
      log,
      requestLog: createRequestLogger(log),
      route: createRouter(config.signedRoutes),
      maxBodyBytes: config.maxBodyBytes,
      connectRetryDeadlineMs: config.upstream.connectRetryDeadlineMs,
      ...(deps.now ? { now: deps.now } : {}),
    }),
  );
  const tracker = new ConnectionTracker(proxy);
  let draining = false;
  let started = false;
  // Startup latches at the first valid token: a later token outage makes the pod unready, never "not started"
  // (which Kubernetes answers with a restart that would not bring the gateway back).
  const isStarted = () => (started ||= tokens.hasValidToken());
  const isReady = () => isStarted() && !draining && tokens.hasValidToken();
  // While draining, every answer asks the client to close its connection, so keep-alive pools move to another
  // replica instead of finding this listener closed (or their socket cut) after the drain delay.
  proxy.on('request', (_req, res: { setHeader(name: string, value: string): unknown }) => {
    if (draining) res.setHeader('connection', 'close');
  });
  let finish: () => void = () => undefined;
  const stopped = new Promise<void>((resolve) => (finish = resolve));
  let shutdownPromise: Promise<void> | undefined;
  const shutdown = (reason: string): Promise<void> =>
    (shutdownPromise ??= (async () => {
      draining = true;
      log.info(
        { event: 'shutdown.begin', reason, drainDelayMs: config.shutdown.drainDelayMs, maxDelayMs: config.shutdown.maxDelayMs, inFlight: tracker.active },
        'draining',
      );
      await sleep(config.shutdown.drainDelayMs);
      const closing = closeServer(proxy);
      const drained = await tracker.waitIdle(config.shutdown.maxDelayMs);
      // Out of time: every client still waiting gets one definitive answer before its connection goes. The
      // request may be at the gateway, so that answer is outcome_unknown (never retryable), not silence.
      const abandoned = tracker.unanswered();
      for (const res of abandoned) writeSidecarError(res, sidecarErrors.outcomeUnknown(504, 'shutdown'));
      proxy.closeAllConnections();
      await closing;
      tokens.stop();
      await (drained ? forwarder.close() : forwarder.destroy());
      await closeServer(admin);
      admin.closeAllConnections();
      log.info({ event: 'shutdown.done', drained, answeredOutcomeUnknown: abandoned.length }, 'stopped');
      finish();
    })());
  metrics.trackReadiness(isReady);
  const admin = createAdminServer({
    registry: metrics.registry,
    health: {
      started: isStarted,
      ready: isReady,
    },
    ...(config.shutdown.quitEndpoint ? { onQuit: () => void shutdown('quitquitquit') } : {}),
  });
  const proxyUrl = await listen(proxy, config.listen.host, config.listen.port);
  const adminUrl = await listen(admin, config.admin.host, config.admin.port);
  tokens.start();
  log.info({ event: 'start', proxyUrl, adminUrl, baseUrl: `${config.base.origin}${config.base.pathPrefix}`, environment: config.environment, keyFingerprint: fingerprint }, 'signing-sidecar started');
  return { proxyUrl, adminUrl, metrics, tokens, log, isReady, shutdown, stopped };
}
