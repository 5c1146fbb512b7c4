import { readFileSync, statSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, resolve } from 'node:path';
import convict from 'convict';
import type * as Yaml from 'yaml';
import { ConfigError } from '../errors.js';
import { attempt } from './attempt.js';
import { parseBaseAddress, type BaseAddress } from './base-url.js';
import type { Config } from './config.js';
import type { ConfigWarning } from './config-warning.js';
import type { FileAccess } from './file-mode.js';
import { forwardedRequestHeaders } from './forwarded-headers.js';
import { allowedHostNames, checkListenHost, unresolvableHosts, type HostKey } from './listen-host.js';
import { loadPostbackSettings } from './postback-settings.js';
import { loadStateSettings } from './state-settings.js';
import { buildSchema, CONFIG_FILE_ENV, envVarOf, settingName, type Settings } from './schema.js';
import { schemaRefusals } from './schema-refusals.js';
import {
  checkBudgetFits,
  memoryBudget,
  MIB,
  POSTBACK_MAX_BODY_BYTES,
  readProcessMemory,
  type MemoryBudget,
} from '../memory/budget.js';
import { settingValues } from './setting-values.js';
import { unknownEnvVars } from './unknown-names.js';
import { Secret } from './secret.js';
import { tracingSettings } from './tracing.js';
import { contentDigest, passwordFromFile } from './secret-files.js';
import { loadSignerSettings } from './signer-settings.js';
import { loadUpstreamSettings } from './upstream-settings.js';

// The YAML parser is loaded only for a YAML config file: most pods are configured by env vars alone, and every
// module a pod loads stays in its memory for its whole life.
const requireOnDemand = createRequire(import.meta.url);
const parseYaml = (text: string): unknown => (requireOnDemand('yaml') as typeof Yaml).parse(text);

convict.addParser([
  { extension: 'json', parse: JSON.parse },
  { extension: ['yml', 'yaml'], parse: parseYaml },
]);

/** Every refusal at once, or the Config: what `serve` and `check` print. */
export type ConfigResult =
  { readonly ok: true; readonly config: Config } | { readonly ok: false; readonly errors: readonly ConfigError[] };

/**
 * Parser messages quote the text around a syntax error, and a config file may hold the password: only the
 * error kind and its position are reported, never the parser's own message.
 */
function describeFileError(err: unknown): string {
  const code = (err as NodeJS.ErrnoException).code;
  if (typeof code === 'string' && code.startsWith('E')) return `cannot read it (${code})`;
  const message = err instanceof Error ? err.message : '';
  const line = /line (\d+)/i.exec(message)?.[1];
  const column = /column (\d+)/i.exec(message)?.[1];
  const position = /position (\d+)/i.exec(message)?.[1];
  const where = line
    ? ` at line ${line}${column ? `, column ${column}` : ''}`
    : position
      ? ` at character ${position}`
      : '';
  return `syntax error${where} (not valid JSON or YAML)`;
}

/** The one reader of a file a setting names: a refusal names the setting and the error code, never the content. */
export function readSecretFile(setting: string, path: string): string {
  try {
    return readFileSync(path, 'utf8');
  } catch (err) {
    throw new ConfigError(setting, `cannot read file ${path}: ${(err as NodeJS.ErrnoException).code ?? 'error'}`);
  }
}

/** The one stat of a file a setting names, for its mode (file-mode.ts): undefined when it cannot be stat-ed. */
export function statSecretFile(path: string): FileAccess | undefined {
  try {
    const { mode, gid } = statSync(path);
    return { mode, gid };
  } catch {
    return undefined;
  }
}

/** What each group's parser gives: its config (or undefined), and its refusals and warnings. */
interface GroupResult {
  readonly errors: readonly ConfigError[];
  readonly warnings?: readonly ConfigWarning[];
}

/** The settings' values (setting-values.ts), and the keys the schema validation refused. */
interface Loaded {
  readonly settings: Settings;
  /** Keys already refused by the schema validation: the checks that read them are skipped. */
  readonly invalid: ReadonlySet<string>;
}

/** Collects refusals so that one run reports them all; checks that depend on a refused value are skipped. */
class Refusals {
  readonly errors: ConfigError[] = [];
  readonly warnings: ConfigWarning[] = [];

  constructor(private readonly invalid: ReadonlySet<string>) {}

  add(setting: string, reason: string): void {
    this.errors.push(new ConfigError(setting, reason));
  }

  /** Runs a check unless one of `keys` was refused already; its ConfigError is recorded and gives undefined. */
  check<T>(keys: readonly string[], run: () => T): T | undefined {
    if (keys.some((key) => this.invalid.has(key))) return undefined;
    return attempt(this.errors, run);
  }

  /** Whether a setting under one of these groups ("postback.") or of these keys was refused. */
  refusedAny(...keysOrGroups: readonly string[]): boolean {
    return [...this.invalid].some((key) => keysOrGroups.some((name) => key === name || key.startsWith(`${name}.`)));
  }

  /** Adds a group parser's refusals and warnings; its result, or null when it refused anything. */
  group<R extends GroupResult>(result: R): R | null {
    this.errors.push(...result.errors);
    this.warnings.push(...(result.warnings ?? []));
    return result.errors.length > 0 ? null : result;
  }
}

/**
 * Applies the config file and the environment (convict applies env vars over the file: defaults < file < env) and
 * validates them. A file that cannot be loaded is the only refusal reported: nothing else can be judged without it.
 */
function loadSettings(env: NodeJS.ProcessEnv, errors: ConfigError[]): Loaded | undefined {
  const schema = buildSchema(env);
  const file = env[CONFIG_FILE_ENV.env];
  let fileDir: string | undefined;
  if (file) {
    try {
      schema.loadFile(file);
    } catch (err) {
      errors.push(new ConfigError(CONFIG_FILE_ENV.env, `cannot load ${file}: ${describeFileError(err)}`));
      return undefined;
    }
    fileDir = dirname(resolve(file));
  }
  const { errors: refused, invalid } = schemaRefusals(schema);
  errors.push(...refused);
  return { settings: settingValues(schema, { env, fileDir }), invalid };
}

/** A setting the schema marks required: its value trimmed, refused when empty. */
function required<K extends 'baseUrl' | 'environment' | 'username'>(
  settings: Settings,
  key: K,
): Exclude<Settings[K], ''> {
  const text: string = settings[key];
  const value = text.trim();
  if (value === '') throw new ConfigError(settingName(key), 'is required');
  // The schema checked the value's format (an environment is one of its values), blank aside.
  return value as Exclude<Settings[K], ''>;
}

function baseAddress(settings: Settings): BaseAddress {
  const raw = required(settings, 'baseUrl');
  try {
    return parseBaseAddress(raw);
  } catch (err) {
    throw new ConfigError(settingName('baseUrl'), (err as Error).message);
  }
}

function loadPassword(settings: Settings): { file: string | undefined; password: Secret; digest: string | undefined } {
  const { passwordFile: file, password: inline } = settings;
  const both = `${settingName('passwordFile')} / ${settingName('password')}`;
  // Refused rather than ranked: with both set, the one not used is the one the operator may think is in effect.
  if (file !== '' && inline !== '') throw new ConfigError(both, 'both are set; set only one (prefer the file)');
  if (file !== '') {
    const setting = settingName('passwordFile');
    const text = readSecretFile(setting, file);
    return { file, password: passwordFromFile(setting, file, text), digest: contentDigest(text) };
  }
  if (inline === '') throw new ConfigError(both, 'one of them is required');
  return { file: undefined, password: new Secret(inline), digest: undefined };
}

function loadedDigests(
  loaded: ReadonlyArray<{ file: string | undefined; digest: string | undefined }>,
): Record<string, string> {
  const digests: Record<string, string> = {};
  for (const { file, digest } of loaded) if (file !== undefined && digest !== undefined) digests[file] = digest;
  return digests;
}

function signedRoutes(settings: Settings): readonly string[] {
  const routes = settings.signedRoutes;
  if (routes.length === 0) {
    // An empty list starts a sidecar that answers every payment 404 while its readiness says ok.
    throw new ConfigError(settingName('signedRoutes'), 'lists no path; give at least one (or leave it unset)');
  }
  const bad = routes.filter((route) => !route.startsWith('/') || /[?#]/.test(route));
  if (bad.length > 0) {
    const quoted = bad.map((route) => `"${route}"`).join(', ');
    throw new ConfigError(settingName('signedRoutes'), `${quoted}: each must be a path starting with / without query`);
  }
  return routes;
}

/** The egress listener's own host, checked by the listen-host rules (listen-host.ts). */
function listenHost(settings: Settings, warnings: ConfigWarning[]): string {
  const host = settings.listen.host.trim();
  const warning = checkListenHost(host, settings.listen.allowNonLoopback);
  if (warning !== undefined) warnings.push(warning);
  return host;
}

/** The listener ports besides the receiver's (0 excluded): the receiver refuses to share one. */
function otherPorts(loaded: Loaded): ReadonlyArray<{ key: string; port: number }> {
  const ports = { 'listen.port': loaded.settings.listen.port, 'admin.port': loaded.settings.admin.port };
  return Object.entries(ports)
    .filter(([key, port]) => !loaded.invalid.has(key) && port !== 0)
    .map(([key, port]) => ({ key, port }));
}

interface Collected {
  /** Set only when nothing was refused. */
  readonly config: Config | undefined;
  readonly errors: readonly ConfigError[];
  /** Listener hosts that passed the other checks, for the name resolution that collectConfig adds. */
  readonly hosts: ReadonlyArray<{ readonly key: HostKey; readonly host: string }>;
}

function collect(env: NodeJS.ProcessEnv): Collected {
  const errors: ConfigError[] = unknownEnvVars(env);
  const loaded = loadSettings(env, errors);
  if (loaded === undefined) return { config: undefined, errors, hosts: [] };
  const { settings } = loaded;
  const refusals = new Refusals(loaded.invalid);
  const base = refusals.check(['baseUrl'], () => baseAddress(settings));
  const environment = refusals.check(['environment'], () => required(settings, 'environment'));
  if (environment === 'production' && base !== undefined && base.protocol !== 'https:') {
    refusals.add(settingName('baseUrl'), 'production requires an https:// base address');
  }
  const username = refusals.check(['username'], () => required(settings, 'username'));
  const password = refusals.check(['passwordFile', 'password'], () => loadPassword(settings));
  const signer = refusals.refusedAny('signer', 'privateKeyFile', 'pkcs11')
    ? null
    : refusals.group(
        loadSignerSettings({
          signer: settings.signer,
          privateKeyFile: settings.privateKeyFile,
          pkcs11: settings.pkcs11,
          readFile: readSecretFile,
          statFile: statSecretFile,
        }),
      );
  const upstream = refusals.refusedAny('upstream.caFile', 'upstream.proxy')
    ? null
    : refusals.group(loadUpstreamSettings({ raw: settings.upstream, base, env, readFile: readSecretFile }));
  refusals.check(['token.refreshAheadMinSeconds', 'token.refreshAheadMaxSeconds'], () => {
    if (settings.token.refreshAheadMinSeconds > settings.token.refreshAheadMaxSeconds) {
      const max = envVarOf('token.refreshAheadMaxSeconds') ?? 'token.refreshAheadMaxSeconds';
      throw new ConfigError(settingName('token.refreshAheadMinSeconds'), `must not exceed ${max}`);
    }
  });
  refusals.check(['idempotency.leaseMs', 'state.redis.commandTimeoutMs'], () => leaseFitsRenewals(settings));
  const routes = refusals.check(['signedRoutes'], () => signedRoutes(settings));
  const postback = refusals.refusedAny('postback')
    ? null
    : refusals.group(
        loadPostbackSettings({
          raw: settings.postback,
          environment,
          stateStore: loaded.invalid.has('state.store') ? undefined : settings.state.store,
          otherPorts: otherPorts(loaded),
          readFile: readSecretFile,
        }),
      );
  const memory = refusals.check(['memoryLimitMb', 'maxBodyBytes'], () => processMemoryBudget(settings, refusals));
  const state =
    refusals.refusedAny('state') || memory === undefined
      ? null
      : refusals.group(loadStateSettings({ raw: settings.state, environment, readFile: readSecretFile, memory }));
  const host = refusals.check(['listen.host', 'listen.allowNonLoopback'], () =>
    listenHost(settings, refusals.warnings),
  );
  const allowedHosts = refusals.check(['listen.allowedHosts'], () => allowedHostNames(settings.listen.allowedHosts));
  const forwarded = refusals.check(['forwardRequestHeaders'], () =>
    forwardedRequestHeaders(settings.forwardRequestHeaders),
  );
  const hosts: Array<{ key: HostKey; host: string }> = [];
  if (host !== undefined) hosts.push({ key: 'listen.host', host });
  // An empty admin host listens on every interface, like its default 0.0.0.0: nothing to resolve.
  const adminHost = loaded.invalid.has('admin.host') ? '' : settings.admin.host.trim();
  if (adminHost !== '') hosts.push({ key: 'admin.host', host: adminHost });
  errors.push(...refusals.errors);
  if (
    errors.length > 0 ||
    base === undefined ||
    environment === undefined ||
    username === undefined ||
    password === undefined ||
    signer?.config === undefined ||
    routes === undefined ||
    host === undefined ||
    allowedHosts === undefined ||
    forwarded === undefined ||
    upstream?.config === undefined ||
    postback === null ||
    memory === undefined ||
    state?.config === undefined
  ) {
    return { config: undefined, errors, hosts };
  }
  const config: Config = {
    base,
    environment,
    username,
    password: password.password,
    signer: signer.config,
    secretFiles: {
      password: password.file,
      pollIntervalMs: settings.secretPollIntervalMs,
      loadedDigests: loadedDigests([...signer.loaded, password, ...upstream.loaded, ...postback.loaded]),
    },
    listen: { ...settings.listen, host, allowedHosts },
    admin: { ...settings.admin, host: adminHost },
    upstream: upstream.config,
    signedRoutes: routes,
    limitsFile: settings.limitsFile.trim() === '' ? undefined : settings.limitsFile,
    forwardedRequestHeaders: forwarded,
    maxBodyBytes: settings.maxBodyBytes,
    memory,
    token: settings.token,
    clock: settings.clock,
    shutdown: settings.shutdown,
    idempotency: settings.idempotency,
    postback: postback.config,
    state: state.config,
    tracing: tracingSettings(settings.tracing, env),
    logLevel: settings.logLevel,
    warnings: refusals.warnings,
  };
  return { config, errors, hosts };
}

/**
 * The process's memory budget from the container's limit (or the setting, or the heap) as read now; a limit that
 * cannot hold the runtime and the bodies in flight is refused. A heap that may grow past the limit is warned about:
 * node started by hand sizes its heap from the memory it sees, the container's included, as if it had it all.
 */
function processMemoryBudget(settings: Settings, refusals: Refusals): MemoryBudget {
  const budget = memoryBudget({
    limitMb: settings.memoryLimitMb,
    process: readProcessMemory(),
    maxBodyBytes: settings.maxBodyBytes,
    maxPostbackBodyBytes: POSTBACK_MAX_BODY_BYTES,
  });
  checkBudgetFits(budget, { limit: settingName('memoryLimitMb'), maxBodyBytes: settingName('maxBodyBytes') });
  const fitting = budget.fittingOldSpaceMb * MIB;
  if (budget.source !== 'heap' && budget.oldSpaceBytes > fitting) {
    refusals.warnings.push({
      setting: settingName('memoryLimitMb'),
      message: `node's old space (${Math.floor(budget.oldSpaceBytes / MIB)} MiB) may grow past the memory limit (${Math.floor(budget.limitBytes / MIB)} MiB, ${budget.source}): start node with --max-old-space-size=${budget.fittingOldSpaceMb}, as the image does (docs/operations.md, "Memory")`,
    });
  }
  return budget;
}

/**
 * A claim's lease is renewed every third of it: a renewal that takes the whole command timeout must still leave the
 * next one time to land before the lease runs out, or a live replica's claim would be taken over.
 */
function leaseFitsRenewals(settings: Settings): void {
  if (settings.state.store !== 'redis') return;
  const { commandTimeoutMs } = settings.state.redis;
  if (settings.idempotency.leaseMs < 2 * commandTimeoutMs) {
    throw new ConfigError(
      settingName('idempotency.leaseMs'),
      `must be at least 2 x ${envVarOf('state.redis.commandTimeoutMs') ?? 'state.redis.commandTimeoutMs'} (${2 * commandTimeoutMs} ms): a renewal sent at a third of the lease must land within it`,
    );
  }
}

/**
 * Loads and validates every setting and reads the secret files; throws a ConfigError naming the first offending
 * setting. Synchronous, for embedding and tests: it does not resolve the listen hosts (collectConfig does).
 */
export function loadConfig(env: NodeJS.ProcessEnv): Config {
  const { config, errors } = collect(env);
  if (config === undefined) throw errors[0] ?? new ConfigError('config', 'invalid');
  return config;
}

/**
 * What `serve` and `check` use: every refusal of loadConfig at once rather than the first, plus the listen and
 * admin hosts resolved as the listeners will resolve them, so an unknown host is a configuration error at start.
 */
export async function collectConfig(env: NodeJS.ProcessEnv): Promise<ConfigResult> {
  const { config, errors, hosts } = collect(env);
  const unresolved = await unresolvableHosts(hosts);
  const all = [...errors, ...unresolved];
  return config !== undefined && all.length === 0 ? { ok: true, config } : { ok: false, errors: all };
}
