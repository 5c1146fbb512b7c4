// The shared state store's settings (docs/fleet.md), validated as one group: load.ts calls
// loadStateSettings and adds its refusals and warnings to the others. Refusals never quote SIDECAR_REDIS_URL:
// a URL someone wrote a password into must not end up in the logs of the pod that refused it.
import type { KeyObject } from 'node:crypto';
import { ConfigError } from '../errors.js';
import { attempt } from './attempt.js';
import type { ConfigWarning } from './config-warning.js';
import { storeMaxBytes, type MemoryBudget } from '../memory/budget.js';
import { envVarOf, settingName, type Environment, type Settings } from './schema.js';
import { caFromFile, macKeysFromFile, passwordFromFile, type ReadSettingFile } from './secret-files.js';
import type { Secret } from './secret.js';

/** A Redis node or Sentinel, as `host:port`. */
export interface RedisNode {
  readonly host: string;
  readonly port: number;
}

/** How the store finds Redis (SIDECAR_REDIS_MODE). */
export type RedisTopology =
  /** `url` is redis:// or rediss://, host, port and database only. */
  | { readonly mode: 'standalone'; readonly url: string }
  | {
      readonly mode: 'sentinel';
      readonly sentinels: readonly RedisNode[];
      readonly master: string;
      readonly sentinelUsername: string | undefined;
      readonly sentinelPassword: Secret | undefined;
      readonly sentinelPasswordFile: string | undefined;
    }
  | { readonly mode: 'cluster'; readonly nodes: readonly RedisNode[] };

/** The MACs on idempotency records and queued postbacks (docs/fleet.md, "Who can write under the prefix"). */
export interface RecordMacConfig {
  /** Newest first: the first signs, every one verifies. Empty: the MAC is off. */
  readonly keys: readonly KeyObject[];
  /** SIDECAR_STATE_MAC_KEY_FILE, watched for rotation; undefined when not set. */
  readonly keyFile: string | undefined;
  /** Records without a MAC are read (always true without a key: nothing can be checked). */
  readonly acceptUnsigned: boolean;
}

/** The Redis store's settings. */
export interface RedisConfig extends Readonly<
  Pick<Settings['state']['redis'], 'keyPrefix' | 'commandTimeoutMs' | 'minReplicasAcked'>
> {
  readonly topology: RedisTopology;
  /** TLS to every node (and Sentinel): rediss:// in standalone mode, SIDECAR_REDIS_TLS in the others. */
  readonly tls: boolean;
  readonly username: string | undefined;
  readonly password: Secret | undefined;
  readonly passwordFile: string | undefined;
  /** PEM of the extra CA, and its file. */
  readonly ca: string | undefined;
  readonly caFile: string | undefined;
  readonly recordMac: RecordMacConfig;
}

export interface StateConfig extends Readonly<Pick<Settings['state'], 'store' | 'memoryMaxEntries'>> {
  /** The memory store's budget (SIDECAR_STATE_MEMORY_MAX_MB, `auto`: its share of the memory budget), in bytes. */
  readonly memoryMaxBytes: number;
  /** Set when store is redis. */
  readonly redis: RedisConfig | undefined;
}

export interface StateInput {
  /** The `state` settings after the schema validation, file paths resolved against the config file's folder. */
  readonly raw: Settings['state'];
  readonly environment: Environment | undefined;
  readonly readFile: ReadSettingFile;
  /** The process's memory budget (memory/budget.ts): the store's `auto` share, and the room a set one must fit. */
  readonly memory: MemoryBudget;
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

/** `host:port` entries (IPv6 in brackets), at least one (a list's items come trimmed, empty ones dropped). */
function nodeList(key: 'sentinels' | 'nodes', entries: readonly string[]): RedisNode[] {
  if (entries.length === 0) throw fail(key, 'needs at least one host:port');
  return entries.map((entry) => {
    const match = /^(\[[0-9a-fA-F:.]+\]|[^:\s/@]+):(\d{1,5})$/.exec(entry);
    const port = Number(match?.[2]);
    if (match === null || port < 1 || port > 65_535) throw fail(key, `"${entry}" is not host:port`);
    return { host: match[1]!.replace(/^\[|\]$/g, ''), port };
  });
}

/** The settings of the other modes, given in this one: refused rather than silently ignored. */
function strayTopologySettings(raw: Settings['state']['redis']): string[] {
  const given: Record<string, boolean> = {
    url: raw.url.trim() !== '',
    sentinels: raw.sentinels.length > 0,
    sentinelMaster: raw.sentinelMaster !== '',
    sentinelUsername: raw.sentinelUsername !== '',
    sentinelPasswordFile: raw.sentinelPasswordFile !== '',
    nodes: raw.nodes.length > 0,
    tls: raw.tls,
  };
  const own: Record<Settings['state']['redis']['mode'], readonly string[]> = {
    standalone: ['url'],
    sentinel: ['sentinels', 'sentinelMaster', 'sentinelUsername', 'sentinelPasswordFile', 'tls'],
    cluster: ['nodes', 'tls'],
  };
  return Object.keys(given).filter((key) => given[key] === true && !own[raw.mode].includes(key));
}

function topologyOf(input: StateInput): { topology: RedisTopology; tls: boolean } {
  const { redis } = input.raw;
  const stray = strayTopologySettings(redis);
  if (stray.length > 0) {
    const names = stray.map((key) => envVarOf(`state.redis.${key}`)).join(', ');
    throw fail('mode', `is ${redis.mode}: ${names} ${stray.length > 1 ? 'belong' : 'belongs'} to another mode`);
  }
  if (redis.mode === 'standalone') {
    const { url, tls } = parseRedisUrl(redis.url);
    return { topology: { mode: 'standalone', url }, tls };
  }
  if (redis.mode === 'cluster')
    return { topology: { mode: 'cluster', nodes: nodeList('nodes', redis.nodes) }, tls: redis.tls };
  const sentinels = nodeList('sentinels', redis.sentinels);
  if (redis.sentinelMaster.trim() === '')
    throw fail('sentinelMaster', `is required when ${envVarOf('state.redis.mode')}=sentinel`);
  const sentinelUsername = redis.sentinelUsername.trim() === '' ? undefined : redis.sentinelUsername.trim();
  if (sentinelUsername !== undefined && redis.sentinelPasswordFile === '') {
    throw fail('sentinelUsername', `needs ${envVarOf('state.redis.sentinelPasswordFile')}`);
  }
  const file = redis.sentinelPasswordFile === '' ? undefined : redis.sentinelPasswordFile;
  const setting = name('sentinelPasswordFile');
  const sentinelPassword =
    file === undefined ? undefined : passwordFromFile(setting, file, input.readFile(setting, file));
  return {
    topology: {
      mode: 'sentinel',
      sentinels,
      master: redis.sentinelMaster.trim(),
      sentinelUsername,
      sentinelPassword,
      sentinelPasswordFile: file,
    },
    tls: redis.tls,
  };
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
  if (tls === false) throw fail('caFile', 'applies to TLS only (rediss://, or SIDECAR_REDIS_TLS=true); TLS is off');
  const setting = name('caFile');
  return { ca: caFromFile(setting, caFile, input.readFile(setting, caFile)), caFile };
}

/**
 * SIDECAR_STATE_MAC_KEY_FILE: required in production (where a forged idempotency answer, token record or postback mark
 * is money),
 * unless SIDECAR_STATE_ACCEPT_UNSIGNED_RECORDS=true says the operator runs without it; staging without it is warned.
 */
function recordMacOf(input: StateInput, warnings: ConfigWarning[]): RecordMacConfig {
  const { macKeyFile, acceptUnsignedRecords } = input.raw;
  const setting = settingName('state.macKeyFile');
  const accept = envVarOf('state.acceptUnsignedRecords');
  if (macKeyFile !== '') {
    const keys = macKeysFromFile(setting, macKeyFile, input.readFile(setting, macKeyFile));
    if (acceptUnsignedRecords) {
      warnings.push({
        setting: settingName('state.acceptUnsignedRecords'),
        message: `is true: records without a MAC are still read; set it false once the rollout is over (docs/fleet.md#turning-the-mac-on)`,
      });
    }
    return { keys, keyFile: macKeyFile, acceptUnsigned: acceptUnsignedRecords };
  }
  if (input.environment === 'production' && !acceptUnsignedRecords) {
    throw new ConfigError(
      setting,
      `is required in production with ${envVarOf('state.store')}=redis: without it, whoever can write under the key prefix can forge the records the sidecar reads back: idempotency answers, the token record, queued and delivered postbacks (docs/security.md#records-in-redis); ${accept}=true runs without`,
    );
  }
  warnings.push({
    setting,
    message:
      'is not set: the records the sidecar keeps in Redis carry no MAC, and whoever can write under the key prefix can forge them (docs/security.md#records-in-redis)',
  });
  return { keys: [], keyFile: undefined, acceptUnsigned: true };
}

function redisSettings(input: StateInput, errors: ConfigError[], warnings: ConfigWarning[]): RedisConfig | undefined {
  const { redis } = input.raw;
  const target = attempt(errors, () => topologyOf(input));
  const secrets = attempt(errors, () => credentials(input));
  const ca = attempt(errors, () => caOf(input, target?.tls));
  const prefix = attempt(errors, () => keyPrefix(redis.keyPrefix));
  const recordMac = attempt(errors, () => recordMacOf(input, warnings));
  if (
    target === undefined ||
    secrets === undefined ||
    ca === undefined ||
    prefix === undefined ||
    recordMac === undefined
  ) {
    return undefined;
  }
  if (!target.tls && input.environment === 'production') {
    const standalone = target.topology.mode === 'standalone';
    warnings.push({
      setting: name(standalone ? 'url' : 'tls'),
      message: `${standalone ? 'redis://' : 'Redis without TLS'} sends access tokens in clear text; use ${standalone ? 'rediss://' : 'SIDECAR_REDIS_TLS=true'} (TLS) in production (docs/fleet.md)`,
    });
  }
  const { commandTimeoutMs } = redis;
  const minReplicasAcked =
    redis.minReplicasAcked === 'auto' ? AUTO_REPLICAS[target.topology.mode] : redis.minReplicasAcked;
  return { ...target, ...secrets, ...ca, keyPrefix: prefix, commandTimeoutMs, minReplicasAcked, recordMac };
}

/**
 * SIDECAR_REDIS_MIN_REPLICAS_ACKED=auto: a standalone endpoint may have no replica, a Sentinel setup always has one
 * (it exists to fail over to it), and a cluster's replicas are known once connected: the store decides then.
 */
const AUTO_REPLICAS = { standalone: 0, sentinel: 1, cluster: 'auto' } as const;

/** Redis settings given while the store is memory: probably a forgotten SIDECAR_STATE_STORE=redis. */
function unusedRedisSettings(raw: Settings['state']): ConfigWarning[] {
  const set = (['url', 'username', 'passwordFile', 'caFile', 'sentinelMaster', 'sentinelPasswordFile'] as const)
    .filter((key) => raw.redis[key] !== '')
    .map(name);
  if (raw.macKeyFile !== '') set.push(settingName('state.macKeyFile'));
  return set.map((setting) => ({
    setting,
    message: `is set but ${envVarOf('state.store')} is memory: Redis is not used`,
  }));
}

export function loadStateSettings(input: StateInput): StateResult {
  const { raw } = input;
  const errors: ConfigError[] = [];
  const warnings: ConfigWarning[] = [];
  const { memoryMaxEntries } = raw;
  if (raw.store !== 'redis') {
    const bytes = attempt(errors, () => storeMaxBytes(raw.memoryMaxMb, input.memory, settingName('state.memoryMaxMb')));
    const config =
      bytes === undefined
        ? undefined
        : ({ store: 'memory', memoryMaxEntries, memoryMaxBytes: bytes, redis: undefined } as const);
    return { config, errors, warnings: [...warnings, ...unusedRedisSettings(raw)] };
  }
  const redis = redisSettings(input, errors, warnings);
  // Unused with Redis, so not judged either: the Redis store keeps nothing in this process.
  const memoryMaxBytesUnused = input.memory.shares.store;
  const config =
    redis === undefined
      ? undefined
      : { store: 'redis' as const, memoryMaxEntries, memoryMaxBytes: memoryMaxBytesUnused, redis };
  return { config, errors, warnings };
}
