import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, resolve } from 'node:path';
import convict from 'convict';
import type * as Yaml from 'yaml';
import { ConfigError } from '../errors.js';
import { attempt } from './collect-errors.js';
import { parseBaseAddress, type BaseAddress } from './base-url.js';
import type { Config, ConfigWarning, Environment } from './config.js';
import { forwardedRequestHeaders } from './forwarded-headers.js';
import { allowedHostNames, checkListenHost, unresolvableHosts, type HostKey } from './listen-host.js';
import { loadPostbackSettings } from './postback-settings.js';
import { loadProxySettings } from './proxy-settings.js';
import { heapLimitBytes } from './memory-budget.js';
import { loadStateSettings } from './state-settings.js';
import { buildSchema, CONFIG_FILE_ENV, envVarOf, settingName, type ConfigSchema } from './schema.js';
import { schemaRefusals } from './schema-refusals.js';
import { unknownEnvVars } from './unknown-names.js';
import { Secret } from './secret.js';
import { tracingRequested } from './tracing.js';
import { caFromFile, contentDigest, passwordFromFile } from './secret-files.js';
import { loadSignerSettings, type SignerConfig, type SignerResult } from './signer-settings.js';

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

type PathKey =
  | 'passwordFile'
  | 'privateKeyFile'
  | 'pkcs11.module'
  | 'pkcs11.pinFile'
  | 'pkcs11.publicKeyFile'
  | 'upstream.caFile'
  | 'upstream.proxy.passwordFile'
  | 'upstream.proxy.caFile'
  | 'postback.publicKeyFile'
  | 'postback.forwardSecretFile'
  | 'state.macKeyFile'
  | 'state.redis.passwordFile'
  | 'state.redis.caFile';

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

function readSecretFile(setting: string, path: string): string {
  try {
    return readFileSync(path, 'utf8');
  } catch (err) {
    throw new ConfigError(setting, `cannot read file ${path}: ${(err as NodeJS.ErrnoException).code ?? 'error'}`);
  }
}

/** The settings after the file and the environment were applied, and the keys their validation refused. */
class Settings {
  constructor(
    readonly schema: ConfigSchema,
    private readonly env: NodeJS.ProcessEnv,
    /** Folder of SIDECAR_CONFIG_FILE, when one was loaded. */
    private readonly fileDir: string | undefined,
    /** Keys already refused by the schema validation: the checks that read them are skipped. */
    readonly invalid: ReadonlySet<string>,
  ) {}

  required(key: 'baseUrl' | 'environment' | 'username'): string {
    const value = this.schema.get(key).trim();
    if (value === '') throw new ConfigError(settingName(key), 'is required');
    return value;
  }

  /**
   * A file path. One written in the config file resolves against the file's folder (like the simulator's --config),
   * so a config folder works from any working directory; one from an env var stays relative to the working directory.
   */
  path(key: PathKey): string {
    const value = this.schema.get(key).trim();
    const envVar = envVarOf(key);
    const fromEnv = envVar !== undefined && this.env[envVar] !== undefined;
    return value === '' || fromEnv || this.fileDir === undefined ? value : resolve(this.fileDir, value);
  }
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
}

/**
 * Applies the config file and the environment (convict applies env vars over the file: defaults < file < env) and
 * validates them. A file that cannot be loaded is the only refusal reported: nothing else can be judged without it.
 */
function loadSettings(env: NodeJS.ProcessEnv, errors: ConfigError[]): Settings | undefined {
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
  return new Settings(schema, env, fileDir, invalid);
}

function baseAddress(settings: Settings): BaseAddress {
  const raw = settings.required('baseUrl');
  try {
    return parseBaseAddress(raw);
  } catch (err) {
    throw new ConfigError(settingName('baseUrl'), (err as Error).message);
  }
}

function environmentOf(settings: Settings): Environment {
  const environment = settings.required('environment');
  if (environment !== 'staging' && environment !== 'production') {
    throw new ConfigError(settingName('environment'), `must be staging or production, not "${environment}"`);
  }
  return environment;
}

function loadPassword(settings: Settings): { file: string | undefined; password: Secret; digest: string | undefined } {
  const file = settings.path('passwordFile');
  const inline = settings.schema.get('password');
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

/** Which signer holds the key (signer-settings.ts): its config, or null when refused. */
function signerSettings(settings: Settings, refusals: Refusals): SignerResult | null {
  if ([...settings.invalid].some((key) => key === 'signer' || key === 'privateKeyFile' || key.startsWith('pkcs11.')))
    return null;
  const result = loadSignerSettings({
    signer: settings.schema.get('signer'),
    privateKeyFile: settings.path('privateKeyFile'),
    pkcs11: {
      ...settings.schema.get('pkcs11'),
      module: settings.path('pkcs11.module'),
      pinFile: settings.path('pkcs11.pinFile'),
      publicKeyFile: settings.path('pkcs11.publicKeyFile'),
    },
    readFile: readSecretFile,
  });
  refusals.errors.push(...result.errors);
  return result.config === undefined ? null : result;
}

function loadCa(settings: Settings): { file: string | undefined; pem: string | undefined; digest: string | undefined } {
  const file = settings.path('upstream.caFile');
  if (file === '') return { file: undefined, pem: undefined, digest: undefined };
  const setting = settingName('upstream.caFile');
  const text = readSecretFile(setting, file);
  return { file, pem: caFromFile(setting, file, text), digest: contentDigest(text) };
}

function loadedDigests(
  loaded: ReadonlyArray<{ file: string | undefined; digest: string | undefined }>,
): Record<string, string> {
  const digests: Record<string, string> = {};
  for (const { file, digest } of loaded) if (file !== undefined && digest !== undefined) digests[file] = digest;
  return digests;
}

/** Comma-separated in the environment (empty items dropped), a list in the file. */
function textList(values: readonly unknown[]): string[] {
  return values.map((value) => String(value).trim()).filter((value) => value !== '');
}

function signedRoutes(settings: Settings): string[] {
  const routes = textList(settings.schema.get('signedRoutes'));
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

/** The proxy's own host, checked by the listen-host rules (listen-host.ts). */
function listenHost(settings: Settings, warnings: ConfigWarning[]): string {
  const host = settings.schema.get('listen.host').trim();
  const warning = checkListenHost(host, settings.schema.get('listen.allowNonLoopback'));
  if (warning !== undefined) warnings.push(warning);
  return host;
}

/** The receiver's group (postback-settings.ts): its config (undefined when off), or null when refused. */
function postbackSettings(
  settings: Settings,
  environment: Environment | undefined,
  refusals: Refusals,
): { config: Config['postback']; loaded: ReadonlyArray<{ file: string; digest: string }> } | null {
  const invalid = [...settings.invalid].filter((key) => key.startsWith('postback.'));
  if (invalid.length > 0) return null;
  const { schema } = settings;
  const otherPorts = (['listen.port', 'admin.port'] as const)
    .filter((key) => !settings.invalid.has(key))
    .map((key) => ({ key, port: schema.get(key) }))
    .filter(({ port }) => port !== 0);
  const raw = {
    ...schema.get('postback'),
    publicKeyFile: settings.path('postback.publicKeyFile'),
    forwardSecretFile: settings.path('postback.forwardSecretFile'),
    allowCidrs: textList(schema.get('postback.allowCidrs')),
    retrySchedule: textList(schema.get('postback.retrySchedule')),
  };
  const stateStore = settings.invalid.has('state.store') ? undefined : schema.get('state.store');
  const { config, errors, warnings, loaded } = loadPostbackSettings({
    raw,
    environment,
    stateStore,
    otherPorts,
    readFile: readSecretFile,
  });
  refusals.errors.push(...errors);
  refusals.warnings.push(...warnings);
  return errors.length > 0 ? null : { config, loaded };
}

/** The forward proxy's group (proxy-settings.ts): its config (undefined: direct), or null when refused. */
function proxySettings(
  settings: Settings,
  base: Config['base'] | undefined,
  env: NodeJS.ProcessEnv,
  refusals: Refusals,
): { config: Config['upstream']['proxy']; loaded: ReadonlyArray<{ file: string; digest: string }> } | null {
  if ([...settings.invalid].some((key) => key.startsWith('upstream.proxy.'))) return null;
  const raw = {
    ...settings.schema.get('upstream.proxy'),
    passwordFile: settings.path('upstream.proxy.passwordFile'),
    caFile: settings.path('upstream.proxy.caFile'),
  };
  const { config, errors, loaded } = loadProxySettings({ raw, base, env, readFile: readSecretFile });
  refusals.errors.push(...errors);
  return errors.length > 0 ? null : { config, loaded };
}

/** The shared state store's group (state-settings.ts): its config, or null when refused. */
function stateSettings(
  settings: Settings,
  environment: Environment | undefined,
  refusals: Refusals,
): Config['state'] | null {
  if ([...settings.invalid].some((key) => key.startsWith('state.'))) return null;
  const raw = {
    ...settings.schema.get('state'),
    macKeyFile: settings.path('state.macKeyFile'),
    redis: {
      ...settings.schema.get('state.redis'),
      passwordFile: settings.path('state.redis.passwordFile'),
      caFile: settings.path('state.redis.caFile'),
    },
  };
  const { config, errors, warnings } = loadStateSettings({
    raw,
    environment,
    readFile: readSecretFile,
    heapLimitBytes: heapLimitBytes(),
  });
  refusals.errors.push(...errors);
  refusals.warnings.push(...warnings);
  return config ?? null;
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
  const settings = loadSettings(env, errors);
  if (settings === undefined) return { config: undefined, errors, hosts: [] };
  const { schema } = settings;
  const refusals = new Refusals(settings.invalid);
  const base = refusals.check(['baseUrl'], () => baseAddress(settings));
  const environment = refusals.check(['environment'], () => environmentOf(settings));
  if (environment === 'production' && base !== undefined && base.protocol !== 'https:') {
    refusals.add(settingName('baseUrl'), 'production requires an https:// base address');
  }
  const username = refusals.check(['username'], () => settings.required('username'));
  const password = refusals.check(['passwordFile', 'password'], () => loadPassword(settings));
  const signer = signerSettings(settings, refusals);
  const ca = refusals.check(['upstream.caFile'], () => loadCa(settings));
  refusals.check(['token.refreshAheadMinSeconds', 'token.refreshAheadMaxSeconds'], () => {
    if (schema.get('token.refreshAheadMinSeconds') > schema.get('token.refreshAheadMaxSeconds')) {
      const max = envVarOf('token.refreshAheadMaxSeconds') ?? 'token.refreshAheadMaxSeconds';
      throw new ConfigError(settingName('token.refreshAheadMinSeconds'), `must not exceed ${max}`);
    }
  });
  const routes = refusals.check(['signedRoutes'], () => signedRoutes(settings));
  const proxy = proxySettings(settings, base, env, refusals);
  const postback = postbackSettings(settings, environment, refusals);
  const state = stateSettings(settings, environment, refusals);
  const host = refusals.check(['listen.host', 'listen.allowNonLoopback'], () =>
    listenHost(settings, refusals.warnings),
  );
  const allowedHosts = refusals.check(['listen.allowedHosts'], () =>
    allowedHostNames(textList(schema.get('listen.allowedHosts'))),
  );
  const forwarded = refusals.check(['forwardRequestHeaders'], () =>
    forwardedRequestHeaders(textList(schema.get('forwardRequestHeaders'))),
  );
  const hosts: Array<{ key: HostKey; host: string }> = [];
  if (host !== undefined) hosts.push({ key: 'listen.host', host });
  // An empty admin host listens on every interface, like its default 0.0.0.0: nothing to resolve.
  const adminHost = settings.invalid.has('admin.host') ? '' : schema.get('admin.host').trim();
  if (adminHost !== '') hosts.push({ key: 'admin.host', host: adminHost });
  errors.push(...refusals.errors);
  if (
    errors.length > 0 ||
    base === undefined ||
    environment === undefined ||
    username === undefined ||
    password === undefined ||
    signer === null ||
    ca === undefined ||
    routes === undefined ||
    host === undefined ||
    allowedHosts === undefined ||
    forwarded === undefined ||
    postback === null ||
    state === null ||
    proxy === null
  ) {
    return { config: undefined, errors, hosts };
  }
  const config: Config = {
    base,
    environment,
    username,
    password: password.password,
    signer: signer.config as SignerConfig,
    secretFiles: {
      password: password.file,
      upstreamCa: ca.file,
      pollIntervalMs: schema.get('secretPollIntervalMs'),
      loadedDigests: loadedDigests([...signer.loaded, password, ca, ...proxy.loaded, ...postback.loaded]),
    },
    listen: { ...schema.get('listen'), host, allowedHosts },
    admin: { ...schema.get('admin'), host: adminHost },
    upstream: {
      ...schema.get('upstream'),
      ca: ca.pem,
      answerCorrelationFields: textList(schema.get('upstream.answerCorrelationFields')),
      proxy: proxy.config,
    },
    signedRoutes: routes,
    forwardedRequestHeaders: forwarded,
    maxBodyBytes: schema.get('maxBodyBytes'),
    token: schema.get('token'),
    clock: schema.get('clock'),
    shutdown: schema.get('shutdown'),
    idempotency: schema.get('idempotency'),
    postback: postback.config,
    state,
    tracing: { ...schema.get('tracing'), enabled: tracingRequested(env) },
    logLevel: schema.get('logLevel'),
    warnings: refusals.warnings,
  };
  return { config, errors, hosts };
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
