// Replicas of one account for the fleet-token tests: TokenManagers sharing one store, a token endpoint stand-in
// with the strictest reading of spec 4.1 (a login revokes every earlier token, a refresh token works once), and a
// store wrapper that can be switched off as a Redis outage would.
import { Secret } from '../../src/config/secret.js';
import { createLogger } from '../../src/observability/log.js';
import { SidecarMetrics } from '../../src/observability/metrics.js';
import { MemoryStateStore } from '../../src/state/memory-store.js';
import { StoreAvailability } from '../../src/state/store-availability.js';
import {
  StateStoreUnavailableError,
  type Condition,
  type ReadRecord,
  type StateStore,
  type Write,
  type WriteOptions,
} from '../../src/state/state-store.js';
import { FleetToken, type FleetTokenOptions } from '../../src/token/fleet-token.js';
import type { TokenClient } from '../../src/token/token-client.js';
import { TokenManager } from '../../src/token/token-manager.js';
import type { GrantResult } from '../../src/token/token-set.js';
import { CapturedOutput } from '../support/sidecar.js';
import { waitFor } from '../support/wait-for.js';

export type Scripted = 'lost' | 'hang' | 'unreachable';

/** The token endpoint: every call recorded; only the newest login's chain works. */
export class StrictGateway implements TokenClient {
  readonly calls: Array<{ grant: 'password' | 'refresh_token'; refreshToken?: string }> = [];
  /** What the next refresh calls do instead of answering normally. */
  readonly nextRefresh: Scripted[] = [];
  /** The next logins that fail before reaching the gateway (a refused connection). */
  unreachableLogins = 0;
  latencyMs = 30;
  accessTtlMs = 60_000;
  private live = new Set<string>();
  private liveAccess = new Set<string>();
  private serial = 0;

  passwordGrant(): Promise<GrantResult> {
    this.calls.push({ grant: 'password' });
    if (this.unreachableLogins > 0) {
      this.unreachableLogins--;
      return Promise.resolve({ kind: 'failed', sent: false, reason: 'ECONNREFUSED' });
    }
    return this.after(() => {
      this.live = new Set();
      this.liveAccess = new Set();
      return this.issue();
    });
  }

  refreshGrant(refreshToken: Secret): Promise<GrantResult> {
    const token = refreshToken.reveal();
    this.calls.push({ grant: 'refresh_token', refreshToken: token });
    const scripted = this.nextRefresh.shift();
    if (scripted === 'hang') return new Promise(() => undefined);
    if (scripted === 'unreachable') return Promise.resolve({ kind: 'failed', sent: false, reason: 'ECONNREFUSED' });
    return this.after(() => {
      if (!this.live.delete(token)) return { kind: 'rejected', status: 401, code: 'FAILED' };
      const granted = this.issue();
      // The gateway acted (the token is rotated) but its answer never arrived.
      return scripted === 'lost' ? { kind: 'failed', sent: true, reason: 'ECONNRESET after send' } : granted;
    });
  }

  logins(): number {
    return this.calls.filter((c) => c.grant === 'password').length;
  }

  refreshes(): number {
    return this.calls.filter((c) => c.grant === 'refresh_token').length;
  }

  /** Would the gateway take this access token now? */
  accepts(accessToken: Secret): boolean {
    return this.liveAccess.has(accessToken.reveal());
  }

  private async after(answer: () => GrantResult): Promise<GrantResult> {
    await new Promise((r) => setTimeout(r, this.latencyMs));
    return answer();
  }

  private issue(): GrantResult {
    const n = ++this.serial;
    this.live.add(`refresh-${n}`);
    this.liveAccess.add(`access-${n}`);
    return grantNumber(n, this.accessTtlMs);
  }
}

/** The gateway's n-th grant: `access-n` / `refresh-n`, the access token alive for `accessTtlMs`, the refresh 8 h. */
export function grantNumber(n: number, accessTtlMs: number): GrantResult {
  return {
    kind: 'granted',
    tokens: {
      accessToken: new Secret(`access-${n}`),
      refreshToken: new Secret(`refresh-${n}`),
      accessExpiresAtMs: Date.now() + accessTtlMs,
      refreshExpiresAtMs: Date.now() + 8 * 3600_000,
      accessRemainingMs: accessTtlMs,
      refreshRemainingMs: 8 * 3600_000,
    },
  };
}

/** One replica's view of the shared store, which can be cut off (every call rejects) and restored. */
export class ReplicaStore implements StateStore {
  readonly kind = 'redis';
  /** Messages published on the shared store reach this replica only while true. */
  hears = true;
  /** Commands this replica sent (or tried to). */
  calls = 0;
  /** Compare-and-set on this key fails as if Redis were away for this replica alone (other commands answer). */
  failKey: string | undefined;
  private readonly availability = new StoreAvailability(undefined, 'test');

  /** `connecting`: the replica's store is still making its first connection until setAvailable says otherwise. */
  constructor(
    private readonly shared: StateStore,
    connecting = false,
  ) {
    if (!connecting) this.availability.up();
  }

  setAvailable(up: boolean): void {
    if (up) this.availability.up();
    else this.availability.down('switched off by the test');
  }

  private get up(): boolean {
    return this.availability.available;
  }

  get(key: string): Promise<string | undefined> {
    return this.call(() => this.shared.get(key));
  }
  read(key: string): Promise<ReadRecord> {
    return this.call(() => this.shared.read(key));
  }
  setIfAbsent(key: string, value: string, ttlMs: number): Promise<boolean> {
    return this.call(() => this.shared.setIfAbsent(key, value, ttlMs));
  }
  compareAndSet(key: string, expected: string | undefined, value: string, ttlMs: number): Promise<boolean> {
    if (key === this.failKey) return Promise.reject(new StateStoreUnavailableError('blip on this key (test)'));
    return this.call(() => this.shared.compareAndSet(key, expected, value, ttlMs));
  }
  writeIf(conditions: readonly Condition[], writes: readonly Write[], options?: WriteOptions): Promise<boolean> {
    return this.call(() => this.shared.writeIf(conditions, writes, options));
  }
  compareAndDelete(key: string, expected: string): Promise<boolean> {
    return this.call(() => this.shared.compareAndDelete(key, expected));
  }
  publish(channel: string, message: string): Promise<void> {
    return this.call(() => this.shared.publish(channel, message));
  }
  subscribe(channel: string, listener: (message: string) => void): Promise<() => Promise<void>> {
    return this.call(() => this.shared.subscribe(channel, (m) => this.up && this.hears && listener(m)));
  }
  isAvailable(): boolean {
    return this.up;
  }
  onAvailabilityChange(listener: (available: boolean) => void): void {
    this.availability.onChange(listener);
  }
  whenAvailable(timeoutMs: number, settle?: boolean, signal?: AbortSignal): Promise<boolean> {
    return this.availability.whenAvailable(timeoutMs, settle, signal);
  }
  close(): Promise<void> {
    return Promise.resolve();
  }

  private call<T>(operation: () => Promise<T>): Promise<T> {
    this.calls++;
    if (!this.up) return Promise.reject(new StateStoreUnavailableError('store unavailable (test)'));
    return operation();
  }
}

export interface Replica {
  readonly tokens: TokenManager;
  readonly store: ReplicaStore;
  readonly metrics: SidecarMetrics;
  readonly logs: CapturedOutput;
  metric(name: string): Promise<number>;
}

/** Short lock, poll, cooldown and look-again times so that the tests run in well under a second each. */
export const FAST: FleetTokenOptions = {
  lockTtlMs: 2_000,
  grantTimeoutMs: 1_000,
  loginCooldownMs: 50,
  pollMs: 20,
  lookAgainMs: 100,
  storeBackWaitMs: 100,
};

export function replica(
  shared: StateStore,
  gateway: StrictGateway,
  options: FleetTokenOptions = FAST,
  setup: { refreshAheadSeconds?: number; storeConnecting?: boolean } = {},
): Replica {
  const store = new ReplicaStore(shared, setup.storeConnecting);
  const metrics = new SidecarMetrics({ version: 't', environment: 'staging', keyFingerprint: 'f' });
  const logs = new CapturedOutput();
  const log = createLogger('debug', logs);
  const ahead = setup.refreshAheadSeconds ?? 20;
  const tokens = new TokenManager(
    gateway,
    {
      refreshAheadMinSeconds: ahead,
      refreshAheadMaxSeconds: ahead,
      backoffBaseMs: 20,
      backoffMaxMs: 100,
      random: () => 0,
      fleet: new FleetToken(store, metrics, log, { ...FAST, ...options }),
    },
    metrics,
    log,
  );
  const metric = async (name: string): Promise<number> => {
    const text = await metrics.registry.metrics();
    const line = text.split('\n').find((l) => l.startsWith(`${name} `));
    return Number(line?.split(' ')[1] ?? Number.NaN);
  };
  return { tokens, store, metrics, logs, metric };
}

/** Two replicas (started by the test's own `start`) on one fresh store, both holding the fleet's first token. */
export async function twoWithTokens(
  start: (shared: MemoryStateStore, gateway: StrictGateway, options?: FleetTokenOptions) => Replica,
  options?: FleetTokenOptions,
): Promise<{ shared: MemoryStateStore; gateway: StrictGateway; a: Replica; b: Replica }> {
  const shared = new MemoryStateStore();
  const gateway = new StrictGateway();
  const a = start(shared, gateway, options);
  const b = start(shared, gateway, options);
  await waitFor('tokens', () => a.tokens.hasValidToken() && b.tokens.hasValidToken());
  return { shared, gateway, a, b };
}
