// The admin subsystem at start: the pod's health as the probes read it, and the listener that serves them with the
// metrics and the egress contract (docs/operations.md). Not listening until listen().
import type { Server } from 'node:http';
import type { Config } from '../config/config.js';
import { openApiDocument, openApiInputs } from '../contract/openapi.js';
import { closeServer, listen } from '../inbound/listener.js';
import type { LimitGuard } from '../limits/guard.js';
import { createAdminServer } from '../observability/health.js';
import type { SidecarMetrics } from '../observability/metrics.js';
import type { Signer } from '../signing/signer.js';
import type { TokenManager } from '../token/token-manager.js';
import type { Egress } from './egress.js';

export interface Admin {
  readonly server: Server;
  /** /readyz: the egress listener serving, the signer able to sign, and a valid token when readiness requires one. */
  readonly isReady: () => boolean;
  /**
   * POST /quitquitquit (SIDECAR_SHUTDOWN_QUIT_ENDPOINT) calls `listener`: the shutdown, which closes this listener
   * in its turn and so is made once this exists.
   */
  onQuit(listener: () => void): void;
  /** Listens on SIDECAR_ADMIN_HOST:SIDECAR_ADMIN_PORT; resolves with the listener's URL. */
  listen(): Promise<string>;
  /** A start that fails: closes the listener and every connection it holds. */
  close(): Promise<void>;
}

export function createAdmin(
  config: Config,
  deps: {
    readonly egress: Pick<Egress, 'started' | 'serving'>;
    /** The egress listener's URL: the server of GET /openapi.json (its port may have been 0). */
    readonly egressUrl: string;
    readonly signer: Pick<Signer, 'available'>;
    readonly tokens: TokenManager;
    readonly metrics: SidecarMetrics;
    /** True past the memory high-water mark (memory/pressure.ts): one metrics page is made at a time. */
    readonly overloaded: () => boolean;
    /** The money limits, when SIDECAR_LIMITS_FILE is set: GET /limits (loopback only). */
    readonly limits?: Pick<LimitGuard, 'figures'> | undefined;
  },
): Admin {
  const { egress, signer, tokens, metrics, limits } = deps;
  // A native sidecar's readiness is the whole pod's (docs/operations.md, "Readiness and the access token"): ready
  // means serving (listening, not draining) unless SIDECAR_READINESS_REQUIRES_TOKEN=true also asks for a valid
  // token. Startup never waits for a token: Kubernetes answers a failed startup probe with a restart, which would
  // not bring the gateway back, and the application behind it would never start.
  const readinessRequiresToken = config.admin.readinessRequiresToken;
  // No signature can be made while the PKCS#11 token is down: the pod leaves its Service until it is back.
  const isReady = () => egress.serving() && signer.available() && (!readinessRequiresToken || tokens.hasValidToken());
  // Made at the first GET /openapi.json.
  let openApiJson: string | undefined;
  let quit: (() => void) | undefined;
  const server = createAdminServer({
    registry: metrics.registry,
    health: {
      started: egress.started,
      ready: isReady,
      serving: egress.serving,
      token: () => {
        const held = tokens.usableToken();
        if (!held) return { valid: false };
        return { valid: true, accessExpiresAtMs: held.accessExpiresAtMs, refreshExpiresAtMs: held.refreshExpiresAtMs };
      },
    },
    readinessRequiresToken,
    openApiJson: () => (openApiJson ??= JSON.stringify(openApiDocument(openApiInputs(config, deps.egressUrl)))),
    ...(config.shutdown.quitEndpoint ? { onQuit: () => quit?.() } : {}),
    limitFigures: limits && (async () => ({ windows: await limits.figures() })),
    overloaded: deps.overloaded,
    onShed: () => metrics.memory.requestShed('admin'),
    onRefused: (reason) => metrics.memory.connectionRefused('admin', reason),
  });
  return {
    server,
    isReady,
    onQuit: (listener) => {
      quit = listener;
    },
    listen: () => listen(server, config.admin.host, config.admin.port),
    async close() {
      const closed = closeServer(server);
      server.closeAllConnections();
      await closed;
    },
  };
}
