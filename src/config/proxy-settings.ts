// The forward proxy in front of the gateway (docs/operations.md, "Egress through a forward proxy"), validated as
// one group: load.ts calls loadProxySettings and adds its refusals to the others. Refusals never quote a proxy
// URL: one that someone wrote a password into must not end up in the logs of the pod that refused it.
import { ConfigError } from '../errors.js';
import type { BaseAddress } from './base-url.js';
import { attempt } from './attempt.js';
import { envVarOf, settingName, type Settings } from './schema.js';
import {
  caFromFile,
  contentDigest,
  passwordFromFile,
  type GroupResult,
  type LoadedFile,
  type ReadSettingFile,
} from './secret-files.js';
import type { Secret } from './secret.js';

/** Where the gateway's connections go first, and how the sidecar proves itself there. */
export interface UpstreamProxyConfig {
  /** `http://host:port` or `https://host:port`, the port always written. */
  readonly origin: string;
  readonly protocol: 'http:' | 'https:';
  /** How logs and refusals name where the address came from: the setting, or the environment variable. */
  readonly source: string;
  /** Basic authentication, when set: the password is read again from its file when that changes. */
  readonly username: string | undefined;
  readonly password: Secret | undefined;
  readonly passwordFile: string | undefined;
  /** PEM of the extra CA for an https:// proxy's own certificate, and its file. */
  readonly ca: string | undefined;
  readonly caFile: string | undefined;
}

export interface ProxyInput {
  /** The `upstream.proxy` settings after the schema validation, file paths resolved. */
  readonly raw: Settings['upstream']['proxy'];
  /** The gateway, to pick HTTPS_PROXY or HTTP_PROXY and to match NO_PROXY; undefined when it was refused. */
  readonly base: BaseAddress | undefined;
  /** The process environment, for HTTPS_PROXY / HTTP_PROXY / NO_PROXY. */
  readonly env: NodeJS.ProcessEnv;
  readonly readFile: ReadSettingFile;
}

/** config undefined: connect to the gateway directly (or refused: errors is then not empty). */
export type ProxyResult = GroupResult<UpstreamProxyConfig>;

const name = (key: string) => settingName(`upstream.proxy.${key}`);
const fail = (key: string, reason: string): ConfigError => new ConfigError(name(key), reason);

/** The proxy's origin, refused when it carries credentials, a path or anything else a proxy address has not. */
export function parseProxyUrl(setting: string, raw: string): { origin: string; protocol: 'http:' | 'https:' } {
  const text = raw.trim();
  let url: URL;
  try {
    url = new URL(text);
  } catch {
    throw new ConfigError(setting, 'is not a URL; write http://proxy.example:3128 or https://proxy.example:3129');
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') {
    throw new ConfigError(setting, `scheme ${url.protocol} is not supported; use http:// or https://`);
  }
  // Checked on the text too: WHATWG URL drops an empty userinfo ("http://@proxy", "http://:@proxy").
  if (url.username !== '' || url.password !== '' || /^https?:\/\/[^/?#]*@/i.test(text)) {
    throw new ConfigError(
      setting,
      `must not carry a username or password; set ${envVarOf('upstream.proxy.username')} and ${envVarOf('upstream.proxy.passwordFile')}`,
    );
  }
  if (url.hostname === '') throw new ConfigError(setting, 'names no host');
  if (url.search !== '' || url.hash !== '' || /[?#]/.test(text)) {
    throw new ConfigError(setting, 'must not have a query or fragment');
  }
  if (url.pathname !== '' && url.pathname !== '/') throw new ConfigError(setting, 'must not have a path');
  const port = url.port === '' ? (url.protocol === 'https:' ? 443 : 80) : Number(url.port);
  return { origin: `${url.protocol}//${url.hostname}:${port}`, protocol: url.protocol };
}

/** The standard variable for this gateway's scheme, lowercase first (as curl and undici read them). */
function proxyFromEnv(env: NodeJS.ProcessEnv, base: BaseAddress): { name: string; value: string } | undefined {
  const names =
    base.protocol === 'https:'
      ? ['https_proxy', 'HTTPS_PROXY', 'http_proxy', 'HTTP_PROXY']
      : ['http_proxy', 'HTTP_PROXY'];
  for (const variable of names) {
    const value = env[variable]?.trim();
    if (value !== undefined && value !== '') return { name: variable, value };
  }
  return undefined;
}

/**
 * Whether NO_PROXY (no_proxy first) covers the gateway, by undici's EnvHttpProxyAgent rules: entries split on
 * commas and blanks, `*` alone covers every host, an entry matches its host and the host's subdomains (a leading
 * `.` or `*.` is ignored), and an entry with a `:port` matches that port only.
 */
export function noProxyCovers(noProxy: string, base: BaseAddress): boolean {
  const value = noProxy.trim();
  if (value === '*') return true;
  const host = base.hostname.toLowerCase();
  const port = Number(new URL(base.origin).port) || (base.protocol === 'https:' ? 443 : 80);
  for (const entry of value.split(/[,\s]/)) {
    if (entry === '') continue;
    const parsed = /^(.+):(\d+)$/.exec(entry);
    const entryHost = (parsed?.[1] ?? entry).replace(/^\*?\./, '').toLowerCase();
    const entryPort = parsed?.[2] === undefined ? 0 : Number(parsed[2]);
    if (entryPort !== 0 && entryPort !== port) continue;
    if (host === entryHost || host.endsWith(`.${entryHost}`)) return true;
  }
  return false;
}

/** The proxy address in effect: the setting, the environment's, or none. */
function proxyAddress(input: ProxyInput): { origin: string; protocol: 'http:' | 'https:'; source: string } | undefined {
  const { raw, base, env } = input;
  if (raw.url.trim() !== '' && raw.fromEnv) {
    // Refused rather than ranked: with both set, the one not used is the one the operator may think is in effect.
    throw fail('url', `and ${envVarOf('upstream.proxy.fromEnv')}=true are both set; set only one`);
  }
  if (raw.url.trim() !== '') return { ...parseProxyUrl(name('url'), raw.url), source: name('url') };
  if (!raw.fromEnv || base === undefined) return undefined;
  const noProxy = env.no_proxy ?? env.NO_PROXY ?? '';
  const found = proxyFromEnv(env, base);
  if (found === undefined || noProxyCovers(noProxy, base)) return undefined;
  const source = `${found.name} (${envVarOf('upstream.proxy.fromEnv')}=true)`;
  return { ...parseProxyUrl(source, found.value), source };
}

export function loadProxySettings(input: ProxyInput): ProxyResult {
  const { raw } = input;
  const errors: ConfigError[] = [];
  const address = attempt(errors, () => proxyAddress(input));
  const configured = raw.url.trim() !== '' || raw.fromEnv;
  const username = raw.username.trim();
  if (username !== '' && raw.passwordFile === '') {
    errors.push(fail('username', `needs ${envVarOf('upstream.proxy.passwordFile')}`));
  }
  if (username === '' && raw.passwordFile !== '') {
    errors.push(fail('passwordFile', `needs ${envVarOf('upstream.proxy.username')}`));
  }
  // Basic authentication joins user and password with a colon: a colon in the user would move the split.
  if (username.includes(':')) errors.push(fail('username', 'must not contain a colon'));
  const unused = (['username', 'passwordFile', 'caFile'] as const).filter((key) => raw[key] !== '');
  if (!configured) {
    for (const key of unused) {
      errors.push(fail(key, `is set but no proxy is: set ${envVarOf('upstream.proxy.url')}`));
    }
    return { config: undefined, errors, loaded: [] };
  }
  if (address?.protocol === 'http:' && raw.caFile !== '') {
    errors.push(fail('caFile', `applies to an https:// proxy only; ${address.source} is http://`));
  }
  const loaded: LoadedFile[] = [];
  const password = attempt(errors, () => {
    if (raw.passwordFile === '') return undefined;
    const setting = name('passwordFile');
    const text = input.readFile(setting, raw.passwordFile);
    loaded.push({ file: raw.passwordFile, digest: contentDigest(text) });
    return passwordFromFile(setting, raw.passwordFile, text);
  });
  const ca = attempt(errors, () => {
    if (raw.caFile === '') return undefined;
    const setting = name('caFile');
    const text = input.readFile(setting, raw.caFile);
    loaded.push({ file: raw.caFile, digest: contentDigest(text) });
    return caFromFile(setting, raw.caFile, text);
  });
  if (errors.length > 0 || address === undefined) return { config: undefined, errors, loaded };
  const config: UpstreamProxyConfig = {
    ...address,
    username: username === '' ? undefined : username,
    password,
    passwordFile: raw.passwordFile === '' ? undefined : raw.passwordFile,
    ca,
    caFile: raw.caFile === '' ? undefined : raw.caFile,
  };
  return { config, errors, loaded };
}
