// The state subsystem at start (docs/fleet.md): the store the settings ask for, and on Redis the epoch that notices a
// Redis come back empty or older, and the MAC keys the secret rotation replaces.
import type { Config } from '../config/config.js';
import type { Logger } from '../observability/log.js';
import type { SidecarMetrics } from '../observability/metrics.js';
import { openStateStore } from '../state/open-store.js';
import type { RecordMac } from '../state/record-mac.js';
import type { RedisStateStore } from '../state/redis-store.js';
import type { StateStore } from '../state/state-store.js';
import { StoreEpoch } from '../state/store-epoch.js';

export interface State {
  /** The store every caller uses: the one opened, or a test's wrapper around it (SidecarDeps.wrapStore). */
  readonly store: StateStore;
  /**
   * The store as opened, when it is Redis: the parts that run scripts of their own (the epoch, the postback inbox)
   * use it, never a wrapper, which would not pass them on. Undefined on the memory store.
   */
  readonly redis: RedisStateStore | undefined;
  /** The MAC on every record in Redis, the store's own (rotated with SIDECAR_STATE_MAC_KEY_FILE). */
  readonly recordMac: RecordMac | undefined;
  /** Redis only: the epoch whose change tells a wipe, already checking. */
  readonly epoch: StoreEpoch | undefined;
  /** Stops the epoch's checks (the store itself is closed by shutdown, once nothing writes to it any more). */
  stop(): void;
  /** A start that fails: stops the epoch's checks and closes the store. */
  close(): Promise<void>;
}

/**
 * Opens the store (on Redis, waits up to FIRST_CONNECT_WAIT_MS for a first answer, open-store.ts) and starts the
 * epoch's checks.
 */
export async function openState(
  config: Config,
  deps: {
    readonly metrics: SidecarMetrics;
    readonly log: Logger;
    readonly wrapStore: ((store: StateStore) => StateStore) | undefined;
  },
): Promise<State> {
  const { metrics, log } = deps;
  const opened = await openStateStore(config, { metrics: metrics.stateStore, log });
  const store = deps.wrapStore ? deps.wrapStore(opened) : opened;
  const redis = opened.kind === 'redis' ? opened : undefined;
  // Redis only: a Redis that comes back empty or older is noticed, and what this replica still holds shared again.
  // On the store as opened: its generation is raised by a script of its own, which no test wrapper passes on.
  const epoch =
    redis === undefined ? undefined : new StoreEpoch(redis, { log, onWiped: () => metrics.stateStore.wiped() });
  epoch?.start();
  const stop = (): void => epoch?.stop();
  return {
    store,
    redis,
    recordMac: redis?.mac,
    epoch,
    stop,
    async close() {
      stop();
      await store.close();
    },
  };
}
