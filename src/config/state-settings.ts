// The shared state store's settings (docs/fleet.md), validated as one group: load.ts calls
// loadStateSettings and adds its refusals and warnings to the others. Refusals never quote SIDECAR_REDIS_URL:
// a URL someone wrote a password into must not end up in the logs of the pod that refused it.
import { ConfigError } from '../errors.js';
import { attempt } from './collect-errors.js';
import type { ConfigWarning, Environment } from './config.js';
import { envVarOf, settingName, type Settings } from './schema.js';
import { caFromFile, passwordFromFile } from './secret-files.js';
import type { Secret } from './secret.js';

/** The Redis store's settings; `url` is redis:// or rediss://, host, port and database only. */
export interface RedisConfig extends Readonly<
  Pick<Settings['state']['redis'], 'url' | 'keyPrefix' | 'commandTimeoutMs' | 'minReplicasAcked'>
> {
  readonly tls: boolean;
  readonly username: string | undefined;
  readonly password: Secret | undefined;
  readonly passwordFile: string | undefined;
  /** PEM of the extra CA, and its file. */
  readonly ca: string | undefined;
  readonly caFile: string | undefined;
}

export interface StateConfig extends Readonly<Pick<Settings['state'], 'store' | 'memoryMaxEntries'>> {
  /** Set when store is redis. */
  readonly redis: RedisConfig | undefined;
}

export interface StateInput {
  /** The `state` settings after the schema validation, file paths resolved against the config file's folder. */
  readonly raw: Settings['state'];
  readonly environment: Environment | undefined;
  readonly readFile: (setting: string, path: string) => string;
}

export interface StateResult {
  readonly config: StateConfig | undefined;
  readonly errors: readonly ConfigError[];
  readonly warnings: readonly ConfigWarning[];
}

const name = (key: string) => settingName(`state.redis.${key}`);
const fail = (key: string, reason: string): ConfigError => new ConfigError(name(key), reason);

/** The URL as node-redis will read it, refused when it would carry credentials or anything but a database. */
export function parseRedisUrl(raw: string): { url: string; tls: boolean } {
  const text = raw.trim();
  if (text === '') throw fail('url', `is required when ${envVarOf('state.store')}=redis`);
  let url: URL;
  try {
    url = new URL(text);
  } catch {
    throw fail('url', 'is not a URL; write redis://host:6379 or rediss://host:6380 (a database number may follow: /0)');
  }
  if (url.protocol !== 'redis:' && url.protocol !== 'rediss:') {
    throw fail('url', `scheme ${url.protocol} is not supported; use redis:// or rediss:// (TLS)`);
  }
  // Checked on the text too: WHATWG URL drops an empty userinfo ("redis://@host", "redis://:@host").
  if (url.username !== '' || url.password !== '' || /^rediss?:\/\/[^/?#]*@/i.test(text)) {
    throw fail(
      'url',
      `must not carry a username or password; set ${envVarOf('state.redis.username')} and ${envVarOf('state.redis.passwordFile')}`,
    );
  }
  if (url.hostname === '') throw fail('url', 'names no host');
  if (url.search !== '' || url.hash !== '' || /[?#]/.test(text)) throw fail('url', 'must not have a query or fragment');
  if (url.pathname !== '' && url.pathname !== '/' && !/^\/\d{1,5}$/.test(url.pathname)) {
    throw fail('url', 'path must be empty or a database number (redis://host:6379/0)');
  }
  return { url: text, tls: url.protocol === 'rediss:' };
}

function keyPrefix(raw: string): string {
  if (raw === '') throw fail('keyPrefix', 'must not be empty (two products on one Redis would share keys)');
  // The store puts the account's hash tag in braces after the prefix: a brace in the prefix would move the tag.
  if (/[{}\s]/.test(raw)) throw fail('keyPrefix', 'must not contain braces or whitespace');
  return raw;
}

function credentials(input: StateInput): Pick<RedisConfig, 'username' | 'password' | 'passwordFile'> {
  const { redis } = input.raw;
  const username = redis.username.trim() === '' ? undefined : redis.username.trim();
  if (username !== undefined && redis.passwordFile === '') {
    throw fail('username', `needs ${envVarOf('state.redis.passwordFile')} (an ACL user logs in with a password)`);
  }
  if (redis.passwordFile === '') return { username, password: undefined, passwordFile: undefined };
  const setting = name('passwordFile');
  const password = passwordFromFile(setting, redis.passwordFile, input.readFile(setting, redis.passwordFile));
  return { username, password, passwordFile: redis.passwordFile };
}

function caOf(input: StateInput, tls: boolean | undefined): Pick<RedisConfig, 'ca' | 'caFile'> {
  const { caFile } = input.raw.redis;
  if (caFile === '') return { ca: undefined, caFile: undefined };
  if (tls === false) throw fail('caFile', 'applies to rediss:// only; the URL is redis:// (no TLS)');
  const setting = name('caFile');
  return { ca: caFromFile(setting, caFile, input.readFile(setting, caFile)), caFile };
}

function redisSettings(input: StateInput, errors: ConfigError[], warnings: ConfigWarning[]): RedisConfig | undefined {
  const { redis } = input.raw;
  const target = attempt(errors, () => parseRedisUrl(redis.url));
  const secrets = attempt(errors, () => credentials(input));
  const ca = attempt(errors, () => caOf(input, target?.tls));
  const prefix = attempt(errors, () => keyPrefix(redis.keyPrefix));
  if (target === undefined || secrets === undefined || ca === undefined || prefix === undefined) return undefined;
  if (!target.tls && input.environment === 'production') {
    warnings.push({
      setting: name('url'),
      message: 'redis:// sends access tokens in clear text; use rediss:// (TLS) in production (docs/fleet.md)',
    });
  }
  const { commandTimeoutMs, minReplicasAcked } = redis;
  return { ...target, ...secrets, ...ca, keyPrefix: prefix, commandTimeoutMs, minReplicasAcked };
}

/** Redis settings given while the store is memory: probably a forgotten SIDECAR_STATE_STORE=redis. */
function unusedRedisSettings(raw: Settings['state']): ConfigWarning[] {
  const set = (['url', 'username', 'passwordFile', 'caFile'] as const).filter((key) => raw.redis[key] !== '');
  return set.map((key) => ({
    setting: name(key),
    message: `is set but ${envVarOf('state.store')} is memory: Redis is not used`,
  }));
}

export function loadStateSettings(input: StateInput): StateResult {
  const { raw } = input;
  if (raw.store !== 'redis') {
    const config = { store: 'memory', memoryMaxEntries: raw.memoryMaxEntries, redis: undefined } as const;
    return { config, errors: [], warnings: unusedRedisSettings(raw) };
  }
  const errors: ConfigError[] = [];
  const warnings: ConfigWarning[] = [];
  const redis = redisSettings(input, errors, warnings);
  const config =
    redis === undefined ? undefined : { store: 'redis' as const, memoryMaxEntries: raw.memoryMaxEntries, redis };
  return { config, errors, warnings };
}
