import type { Config } from '../config/config.js';
import { readSecretFile } from '../config/load.js';
import { settingName } from '../config/schema.js';
import { ConfigError } from '../errors.js';
import { limitRulesFromFile, MEMORY_STORE_WARNING } from '../limits/rules.js';
import type { CheckReport } from './check-report.js';

/**
 * SIDECAR_LIMITS_FILE (docs/limits.md): the rules as `serve` reads them, and a warning when the store cannot share
 * them: on the memory store each replica counts alone.
 */
export function checkLimits(config: Config, report: CheckReport): void {
  const file = config.limitsFile;
  if (file === undefined) return;
  const setting = settingName('limitsFile');
  let count: { enforce: number; report: number };
  try {
    const { rules } = limitRulesFromFile(config.signedRoutes)(setting, file, readSecretFile(setting, file));
    count = {
      enforce: rules.filter((rule) => rule.mode === 'enforce').length,
      report: rules.filter((rule) => rule.mode === 'report').length,
    };
  } catch (err) {
    if (!(err instanceof ConfigError)) throw err;
    report.line('✘', 'limits', err.message);
    return;
  }
  report.line('✔', 'limits', `${count.enforce} enforced and ${count.report} report-mode rules in ${file}`);
  if (config.state.store === 'memory' && count.enforce + count.report > 0)
    report.line('!', 'limits', MEMORY_STORE_WARNING);
}
