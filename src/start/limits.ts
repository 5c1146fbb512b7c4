// The money limits at start (docs/limits.md): SIDECAR_LIMITS_FILE read and checked whole, or no limits at all. A
// refused file stops the start naming the setting; later changes are read by the secret rotation's watcher.
import type { Config } from '../config/config.js';
import { readSecretFile } from '../config/load.js';
import { settingName } from '../config/schema.js';
import { contentDigest } from '../config/secret-files.js';
import { LimitGuard } from '../limits/guard.js';
import { limitRulesFromFile, MEMORY_STORE_WARNING } from '../limits/rules.js';
import type { Logger } from '../observability/log.js';
import type { SidecarMetrics } from '../observability/metrics.js';
import type { StateStore } from '../state/state-store.js';

/** The money limits in use, and the digest of the file's content they were read from (the watcher's baseline). */
interface OpenedLimits {
  readonly guard: LimitGuard;
  readonly loadedDigest: string;
}

export function openLimits(
  config: Config,
  deps: {
    readonly store: StateStore;
    readonly metrics: SidecarMetrics;
    readonly log: Logger;
    readonly now: () => number;
  },
): OpenedLimits | undefined {
  const file = config.limitsFile;
  if (file === undefined) return undefined;
  const setting = settingName('limitsFile');
  const text = readSecretFile(setting, file);
  const rules = limitRulesFromFile(config.signedRoutes)(setting, file, text);
  const guard = new LimitGuard({ store: deps.store, now: deps.now, log: deps.log, metrics: deps.metrics.limits });
  guard.use(rules);
  if (deps.store.kind === 'memory' && rules.rules.length > 0) {
    deps.log.warn({ event: 'config.warning', setting }, MEMORY_STORE_WARNING);
  }
  return { guard, loadedDigest: contentDigest(text) };
}
