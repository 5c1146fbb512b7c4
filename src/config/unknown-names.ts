import { ConfigError } from '../errors.js';
import { CONFIG_FILE_ENV, EVERY_SETTING } from './schema.js';

// A setting whose name is misspelled is not applied, and nothing else would say so: SIDECAR_IDEMPOTENCY_REQUIERD=true
// leaves payments without an Idempotency-Key accepted. Every SIDECAR_* variable and
// every config-file key must therefore be a setting, or the sidecar does not start; the refusal names the closest.

const PREFIX = 'SIDECAR_';

/** Every SIDECAR_* variable the sidecar reads: the settings' and the config file's. Nothing else reads one. */
export const KNOWN_ENV_VARS: ReadonlySet<string> = new Set([...EVERY_SETTING.map((s) => s.env), CONFIG_FILE_ENV.env]);

/**
 * Read by the callers, never by the sidecar: the example callers find the sidecar at SIDECAR_URL (docs/clients.md).
 * A pod that gives both containers the same variables (one envFrom) must still start.
 */
export const CALLER_ENV_VARS: ReadonlySet<string> = new Set(['SIDECAR_URL']);

const SETTING_KEYS: readonly string[] = EVERY_SETTING.map((s) => s.key);

/**
 * Kubernetes gives each container variables for every Service of its namespace (enableServiceLinks, on by
 * default): a Service named "sidecar-metrics" adds SIDECAR_METRICS_SERVICE_HOST, SIDECAR_METRICS_PORT=tcp://...
 * and SIDECAR_METRICS_PORT_9464_TCP_ADDR. They are not settings, and must not keep the sidecar from starting.
 * A bare `_PORT` is one only with its tcp:// (udp, sctp) value: SIDECAR_ADMN_PORT=9464 is still a typo.
 */
function isServiceLink(name: string, value: string | undefined): boolean {
  if (/_SERVICE_(HOST|PORT)(_[A-Z0-9_]+)?$|_PORT_\d+_(TCP|UDP|SCTP)(_PROTO|_PORT|_ADDR)?$/.test(name)) return true;
  return name.endsWith('_PORT') && /^(tcp|udp|sctp):\/\//.test(value ?? '');
}

/** The refusals of every SIDECAR_* variable (any case) that is no setting, each naming the closest one. */
export function unknownEnvVars(env: NodeJS.ProcessEnv): ConfigError[] {
  return Object.keys(env)
    .filter((name) => name.toUpperCase().startsWith(PREFIX) && !KNOWN_ENV_VARS.has(name) && env[name] !== undefined)
    .filter((name) => !isServiceLink(name, env[name]) && !CALLER_ENV_VARS.has(name))
    .map((name) => {
      const wanted = name.toUpperCase().slice(PREFIX.length);
      const known = [...KNOWN_ENV_VARS].map((v) => v.slice(PREFIX.length));
      const near = closest(wanted, known);
      const hint = near === undefined ? 'the settings are in docs/configuration.md' : `did you mean ${PREFIX}${near}?`;
      return new ConfigError(name, `is not a setting; ${hint}`);
    });
}

/** "; did you mean 'x'?" for a config-file key that no setting declares, or nothing when none is close. */
export function closestKeyHint(key: string): string {
  const near = closest(key, SETTING_KEYS);
  return near === undefined ? '' : `; did you mean '${near}'?`;
}

/**
 * The candidate nearest to `name` by edit distance (ignoring case), if close enough to be the one meant: at most
 * a third of the name's letters apart (and 2 for short names). A far one would mislead more than help.
 */
export function closest(name: string, candidates: readonly string[]): string | undefined {
  const limit = Math.max(2, Math.floor(name.length / 3));
  let best: { candidate: string; distance: number } | undefined;
  for (const candidate of candidates) {
    const distance = editDistance(name.toLowerCase(), candidate.toLowerCase());
    if (distance <= limit && (best === undefined || distance < best.distance)) best = { candidate, distance };
  }
  return best?.candidate;
}

/**
 * Levenshtein distance (insertions, deletions, substitutions), one row at a time. Written here rather than taken
 * from npm: a dozen lines, run once at start, in the process that holds the key and password, where every
 * dependency is code that could read them.
 */
export function editDistance(a: string, b: string): number {
  let row = Array.from({ length: b.length + 1 }, (_, j) => j);
  for (let i = 1; i <= a.length; i++) {
    const next = [i];
    for (let j = 1; j <= b.length; j++) {
      const substitution = (row[j - 1] ?? 0) + (a[i - 1] === b[j - 1] ? 0 : 1);
      next.push(Math.min((row[j] ?? 0) + 1, (next[j - 1] ?? 0) + 1, substitution));
    }
    row = next;
  }
  return row[b.length] ?? 0;
}
