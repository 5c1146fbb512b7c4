// The tokens subsystem at start: the one gateway client (undici), and the token manager that logs in and refreshes
// through it, on its own or, with the Redis store, as the fleet's (docs/fleet.md).
import type { Config } from '../config/config.js';
import type { Logger } from '../observability/log.js';
import type { SidecarMetrics } from '../observability/metrics.js';
import type { Tracing } from '../observability/tracing.js';
import { PasswordHolder } from './secret-rotation.js';
import type { ClockCorrection } from '../signing/clock-correction.js';
import { refusedRecordReport } from '../state/refused-record.js';
import type { StateStore } from '../state/state-store.js';
import type { StoreEpoch } from '../state/store-epoch.js';
import { fleetTokenFor } from '../token/fleet-token.js';
import { createTokenClient } from '../token/token-client.js';
import { TokenManager } from '../token/token-manager.js';
import { UndiciGatewayClient, type RotatableGatewayClient } from '../upstream/gateway-client.js';

export interface Tokens {
  /** The one client to the gateway: logins here, signed requests in the egress path. */
  readonly gatewayClient: RotatableGatewayClient;
  /** The password the next login uses (rotated from its file). */
  readonly password: PasswordHolder;
  /** Not started: its first login begins once the listeners listen. */
  readonly manager: TokenManager;
  /** A start that fails: stops the manager, lets a grant in flight reach the store, drops the gateway connections. */
  close(): Promise<void>;
}

export function createTokens(
  config: Config,
  deps: {
    readonly store: StateStore;
    readonly clock: ClockCorrection;
    /** Redis's epoch: a wipe of the store is noticed by the fleet's token too. */
    readonly epoch: StoreEpoch | undefined;
    readonly metrics: SidecarMetrics;
    readonly log: Logger;
    readonly now: () => number;
    readonly tracing: Tracing;
  },
): Tokens {
  const { clock, metrics, log, now, tracing } = deps;
  // Every gateway answer's Date header is measured, token grants' too: the first payment after start is already
  // signed with the corrected time. Every failed send is counted by the hop that failed (the gateway, or the forward
  // proxy in front of it).
  const gatewayClient = new UndiciGatewayClient(config.base, config.upstream, {
    onAnswer: (answer) => clock.observe(answer.headers.date, Date.now()),
    onFailure: (failure) => metrics.upstreamFailure(failure.hop, failure.kind),
    tracing,
  });
  const password = new PasswordHolder(config.password);
  const fleet = fleetTokenFor(deps.store, clock, metrics, log, {
    connectTimeoutMs: config.upstream.connectTimeoutMs,
    responseTimeoutMs: config.upstream.responseTimeoutMs,
    now,
    wipes: deps.epoch,
    // The route the store's own refusals take (open-store.ts): one counter, one log line.
    recordRefused: refusedRecordReport(metrics.stateStore, log),
  });
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
  const manager = new TokenManager(client, options, metrics, log);
  return {
    gatewayClient,
    password,
    manager,
    async close() {
      manager.stop();
      await manager.settle();
      await gatewayClient.destroy();
    },
  };
}
