// The postback receiver's settings (docs/postbacks.md), validated as one group: load.ts calls loadPostbackSettings and
// adds its refusals to the others. Off (undefined) unless SIDECAR_POSTBACK_FORWARD_URL is set.
import { createSecretKey, type KeyObject } from 'node:crypto';
import { BlockList, isIP } from 'node:net';
import { ConfigError } from '../errors.js';
import { attempt } from './attempt.js';
import type { ConfigWarning } from './config-warning.js';
import { parsePublicKeys } from './public-keys.js';
import { settingName, withoutConsumed, type Environment, type GroupConfig, type Settings } from './schema.js';
import { contentDigest, type LoadedFile, type ReadSettingFile } from './secret-files.js';

/** The webhook URL registered with the gateway, split as spec 5.2 signs it (the postback layer joins the parts). */
export interface PostbackPublicUrl {
  /** Lowercase scheme and host, default port omitted. */
  readonly origin: string;
  readonly protocol: 'http:' | 'https:';
  readonly hostname: string;
  /** Path exactly as written (the one route the receiver serves). */
  readonly path: string;
  /** Query without "?", byte for byte; "" when absent or empty. */
  readonly query: string;
}

export interface PostbackSourceAllowList {
  /** The ranges as configured, for logs and `check`. */
  readonly ranges: readonly string[];
  readonly list: BlockList;
}

/** What the receiver's parser makes of the settings it does not use as they are. */
interface PostbackParsed {
  /** `auto` resolved: `queued` in production with Redis, `direct` otherwise. */
  readonly delivery: PostbackDeliveryMode;
  readonly publicUrl: PostbackPublicUrl;
  /** The gateway's postback keys (several during a rotation); empty only when unsigned postbacks are accepted. */
  readonly publicKeys: readonly KeyObject[];
  readonly publicKeyFile: string | undefined;
  /** Undefined: any source. */
  readonly allowCidrs: PostbackSourceAllowList | undefined;
  /** `queued` delivery: the delay before each attempt, in ms (the first one included). */
  readonly retryScheduleMs: readonly number[];
  /**
   * The Standard Webhooks secret that signs what the application gets (the decoded bytes after `whsec_`, as a
   * KeyObject, which never prints them); undefined: delivered unsigned (staging without the file, or signing off).
   */
  readonly forwardSecret: KeyObject | undefined;
  readonly forwardSecretFile: string | undefined;
}

/** Settings read into a parsed field of another name (retryScheduleMs, forwardSecret). */
const CONSUMED = ['retrySchedule', 'forwardSigning'] as const;

/** The receiver's settings: those used as they are keep the schema's type, the others are parsed or loaded. */
export type PostbackConfig = GroupConfig<Settings['postback'], PostbackParsed, (typeof CONSUMED)[number]>;

export interface PostbackInput {
  /** The `postback` settings after the schema validation (setting-values.ts: paths resolved, lists trimmed). */
  readonly raw: Settings['postback'];
  /** The state store (SIDECAR_STATE_STORE): `queued` delivery keeps its postbacks in Redis. */
  readonly stateStore: string | undefined;
  readonly environment: Environment | undefined;
  /** Ports the other listeners take (0 excluded by the caller): a shared port would fail at start. */
  readonly otherPorts: ReadonlyArray<{ readonly key: string; readonly port: number }>;
  readonly readFile: ReadSettingFile;
}

/** Standard Webhooks' symmetric secrets: 24 to 64 random bytes (192 to 512 bits). */
export const FORWARD_SECRET_BYTES = { min: 24, max: 64 } as const;
const FORWARD_SECRET_PREFIX = 'whsec_';
const BASE64 = /^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$/;

/**
 * SIDECAR_POSTBACK_FORWARD_SECRET_FILE: `whsec_` and the standard base64 of 24 to 64 bytes, surrounding whitespace
 * ignored (the newline `echo` and editors leave). The same check at start and at every reload; the reasons never
 * quote the content.
 */
export function forwardSecretFromFile(setting: string, file: string, text: string): KeyObject {
  const value = text.trim();
  const expected = `expected whsec_ followed by the base64 of ${FORWARD_SECRET_BYTES.min} to ${FORWARD_SECRET_BYTES.max} random bytes`;
  if (!value.startsWith(FORWARD_SECRET_PREFIX)) {
    throw new ConfigError(setting, `${file} holds no Standard Webhooks secret: ${expected}`);
  }
  const encoded = value.slice(FORWARD_SECRET_PREFIX.length);
  if (!BASE64.test(encoded)) {
    throw new ConfigError(setting, `${file}: the part after whsec_ is not standard base64; ${expected}`);
  }
  const bytes = Buffer.from(encoded, 'base64');
  if (bytes.length < FORWARD_SECRET_BYTES.min || bytes.length > FORWARD_SECRET_BYTES.max) {
    throw new ConfigError(setting, `${file}: the secret decodes to ${bytes.length} bytes; ${expected}`);
  }
  return createSecretKey(bytes);
}

interface ForwardSigning {
  readonly secret: KeyObject | undefined;
  readonly file: string | undefined;
  /** contentDigest of the file as loaded: the rotation watcher's starting point. */
  readonly digest: string | undefined;
}

const UNSIGNED: ForwardSigning = { secret: undefined, file: undefined, digest: undefined };

/**
 * Signed when the secret file is set; the file is required in production, where the application is
 * reachable from the namespace (docs/postbacks.md#signed-for-the-application), unless signing is turned off.
 */
function forwardSigning(
  input: PostbackInput,
  errors: ConfigError[],
  warnings: ConfigWarning[],
): ForwardSigning | undefined {
  const { raw } = input;
  const file = raw.forwardSecretFile;
  const fileSetting = settingName('postback.forwardSecretFile');
  const signingSetting = settingName('postback.forwardSigning');
  if (raw.forwardSigning === 'off') {
    if (file !== '') {
      errors.push(fail('forwardSigning', `is off but ${fileSetting} is set; set only one`));
      return undefined;
    }
    warnings.push({
      setting: signingSetting,
      message:
        'postbacks are delivered to the application UNSIGNED: anything that can reach it can forge a SUCCESS; set a forward secret (docs/postbacks.md#signed-for-the-application)',
    });
    return UNSIGNED;
  }
  if (file === '') {
    if (input.environment !== 'production') return UNSIGNED;
    errors.push(
      fail(
        'forwardSecretFile',
        `is required in production, so that the application can tell the sidecar's postbacks from forged ones (docs/postbacks.md#signed-for-the-application); ${signingSetting}=off delivers them unsigned`,
      ),
    );
    return undefined;
  }
  return attempt(errors, () => {
    const text = input.readFile(fileSetting, file);
    return { secret: forwardSecretFromFile(fileSetting, file, text), file, digest: contentDigest(text) };
  });
}

/** A nonce is remembered for the whole timestamp window plus this margin (the gateway: 65 s window, ~95 s memory). */
export const NONCE_MARGIN_SECONDS = 30;

/** How long `postback:nonce:<nonce>` is kept. */
export function nonceTtlSeconds(config: Pick<PostbackConfig, 'maxAgeSeconds' | 'maxFutureSeconds'>): number {
  return config.maxAgeSeconds + config.maxFutureSeconds + NONCE_MARGIN_SECONDS;
}

const DURATION_UNITS_MS: Readonly<Record<string, number>> = { ms: 1, s: 1_000, m: 60_000, h: 3_600_000, d: 86_400_000 };

/** `0s,5s,5m,2h`: each delay in ms. A bare number is refused: a unit left out is too easy to misread. */
export function parseRetrySchedule(entries: readonly string[]): number[] {
  if (entries.length === 0) throw fail('retrySchedule', 'is empty; give at least one delay (0s)');
  return entries.map((entry) => {
    const match = /^(\d+(?:\.\d+)?)(ms|s|m|h|d)$/.exec(entry.trim());
    const unit = match === null ? undefined : DURATION_UNITS_MS[match[2] ?? ''];
    if (match === null || unit === undefined) {
      throw fail('retrySchedule', `"${entry}" is not a delay with its unit (250ms, 5s, 5m, 2h, 1d)`);
    }
    return Math.round(Number(match[1]) * unit);
  });
}

const fail = (key: string, reason: string): ConfigError => new ConfigError(settingName(`postback.${key}`), reason);

function forwardUrl(raw: string): string {
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    throw fail('forwardUrl', `"${raw}" is not an absolute URL`);
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') {
    throw fail('forwardUrl', `scheme ${url.protocol} is not supported; use http:// or https://`);
  }
  if (url.hash !== '' || raw.includes('#')) throw fail('forwardUrl', 'must not carry a fragment');
  // The application client would drop them without a word (no Authorization header is made of them), and the application
  // would refuse every postback; the reason does not quote them.
  if (url.username !== '' || url.password !== '') throw fail('forwardUrl', 'must not carry credentials (user:pass@)');
  return raw;
}

const ABSOLUTE = /^([A-Za-z][A-Za-z0-9+.-]*):\/\/([^/?#]*)([^?#]*)(?:\?([^#]*))?$/s;

/**
 * The path is kept as written, not as WHATWG URL would re-encode it: the gateway signs the URL it posts to. A
 * path that URL parsing would change (spaces, "..", non-ASCII) is refused, so that what is signed is unambiguous.
 */
export function parsePostbackPublicUrl(raw: string, environment: Environment | undefined): PostbackPublicUrl {
  const match = ABSOLUTE.exec(raw.trim());
  let url: URL | undefined;
  try {
    url = new URL(raw.trim());
  } catch {
    url = undefined;
  }
  if (!match || url === undefined) {
    throw fail('publicUrl', `"${raw}" is not an absolute URL without fragment (https://host/path)`);
  }
  const [, , authority = '', rawPath = '', query = ''] = match;
  if (url.protocol !== 'http:' && url.protocol !== 'https:')
    throw fail('publicUrl', `scheme ${url.protocol} is not supported`);
  if (authority.includes('@')) throw fail('publicUrl', 'must not carry credentials');
  const path = rawPath === '' ? '/' : rawPath;
  if (url.pathname !== path) {
    throw fail(
      'publicUrl',
      `path "${path}" is not in canonical form (URL parsing makes it "${url.pathname}"); write it that way`,
    );
  }
  if (url.protocol === 'http:' && environment === 'production') {
    throw fail('publicUrl', 'production requires https:// (the gateway posts over TLS to the Ingress)');
  }
  return { origin: `${url.protocol}//${url.host}`, protocol: url.protocol, hostname: url.hostname, path, query };
}

/** "10.0.0.0/8", "2001:db8::/32", or one address. */
export function parseAllowCidrs(ranges: readonly string[]): PostbackSourceAllowList {
  const list = new BlockList();
  for (const range of ranges) {
    const [address = '', prefix, extra] = range.split('/');
    const family = isIP(address);
    const max = family === 4 ? 32 : 128;
    const bits = prefix === undefined ? max : /^\d{1,3}$/.test(prefix) ? Number(prefix) : NaN;
    if (family === 0 || extra !== undefined || !(bits >= 0 && bits <= max)) {
      throw fail('allowCidrs', `"${range}" is not an IP address or CIDR range (10.0.0.0/8, 2001:db8::/32)`);
    }
    list.addSubnet(address, bits, family === 4 ? 'ipv4' : 'ipv6');
  }
  return { ranges: [...ranges], list };
}

/**
 * SIDECAR_POSTBACK_PUBLIC_KEY_FILE: at least one RSA public key of at least 2048 bits. The same check at start and
 * at every reload of a rotated file (secret-rotation.ts).
 */
export function postbackKeysFromFile(setting: string, file: string, text: string): KeyObject[] {
  try {
    return parsePublicKeys(text);
  } catch (err) {
    throw new ConfigError(setting, `${file}: ${(err as Error).message}`);
  }
}

function publicKeys(input: PostbackInput, errors: ConfigError[]): readonly KeyObject[] | undefined {
  const { raw } = input;
  if (raw.publicKeyFile === '') {
    if (raw.acceptUnsigned) return [];
    errors.push(fail('publicKeyFile', `is required unless ${settingName('postback.acceptUnsigned')} is true`));
    return undefined;
  }
  const setting = settingName('postback.publicKeyFile');
  return attempt(errors, () =>
    postbackKeysFromFile(setting, raw.publicKeyFile, input.readFile(setting, raw.publicKeyFile)),
  );
}

function crossChecks(input: PostbackInput, errors: ConfigError[]): void {
  const { raw } = input;
  if (raw.acceptUnsigned && raw.allowCidrs.length === 0) {
    errors.push(
      fail(
        'acceptUnsigned',
        `requires ${settingName('postback.allowCidrs')}: unsigned postbacks are trusted by source address only`,
      ),
    );
  }
  // Unsigned postbacks are trusted by their source alone: a range of every address would trust anyone.
  const everyAddress = raw.allowCidrs.find((range) => /\/0+$/.test(range));
  if (raw.acceptUnsigned && everyAddress !== undefined) {
    errors.push(
      fail('allowCidrs', `"${everyAddress}" admits every address, so unsigned postbacks would be trusted from anyone`),
    );
  }
  if (raw.listen.port !== 0) {
    for (const other of input.otherPorts) {
      if (other.port === raw.listen.port) {
        errors.push(
          fail('listen.port', `${raw.listen.port} is also ${settingName(other.key)}; give each listener its own port`),
        );
      }
    }
  }
  const nonceSeconds = nonceTtlSeconds(raw);
  if (raw.deliveredTtlSeconds < nonceSeconds) {
    errors.push(
      fail(
        'deliveredTtlSeconds',
        `must be at least ${nonceSeconds} s (the timestamp window plus ${NONCE_MARGIN_SECONDS} s), or a replay inside the window could be delivered twice`,
      ),
    );
  }
  if (raw.visibilityTimeoutMs <= raw.forwardTimeoutMs) {
    errors.push(
      fail(
        'visibilityTimeoutMs',
        `must be longer than ${settingName('postback.forwardTimeoutMs')} (${raw.forwardTimeoutMs} ms), or a postback still being delivered would be taken over and delivered twice`,
      ),
    );
  }
  if (raw.orderField.trim() === '') errors.push(fail('orderField', "is empty; give the payload's transaction field"));
  if (raw.delivery === 'queued' && input.stateStore !== 'redis') {
    errors.push(
      fail(
        'delivery',
        `queued requires ${settingName('state.store')}=redis: with ${settingName('state.store')}=memory an accepted postback would be lost with the pod`,
      ),
    );
  }
  if (raw.listen.host.trim() === '')
    errors.push(fail('listen.host', 'is empty; give an address (0.0.0.0 for every interface)'));
}

export type PostbackDeliveryMode = 'direct' | 'queued';

/**
 * `auto`: `queued` where postbacks are money and a durable store exists (production with Redis: the spec does not
 * promise a redelivery, so a postback the application missed would be lost); `direct` otherwise, where the
 * sidecar has no durable place to keep one.
 */
export function resolveDelivery(
  setting: Settings['postback']['delivery'],
  input: Pick<PostbackInput, 'stateStore' | 'environment'>,
): PostbackDeliveryMode {
  if (setting !== 'auto') return setting;
  return input.environment === 'production' && input.stateStore === 'redis' ? 'queued' : 'direct';
}

export interface PostbackSettingsResult {
  readonly config?: PostbackConfig;
  readonly errors: ConfigError[];
  readonly warnings: ConfigWarning[];
  /** The secret files read, with their content digests (the rotation watcher's starting point). */
  readonly loaded: readonly LoadedFile[];
}

/** Undefined and no refusal when the receiver is off; every refusal of the group at once otherwise. */
export function loadPostbackSettings(input: PostbackInput): PostbackSettingsResult {
  const { raw } = input;
  const errors: ConfigError[] = [];
  const warnings: ConfigWarning[] = [];
  if (raw.forwardUrl.trim() === '') return { errors, warnings, loaded: [] };
  const forward = attempt(errors, () => forwardUrl(raw.forwardUrl.trim()));
  const publicUrl =
    raw.publicUrl.trim() === ''
      ? (errors.push(
          fail('publicUrl', 'is required when the postback receiver is on (the URL registered with the gateway)'),
        ),
        undefined)
      : attempt(errors, () => parsePostbackPublicUrl(raw.publicUrl, input.environment));
  const keys = publicKeys(input, errors);
  const signing = forwardSigning(input, errors, warnings);
  const schedule = attempt(errors, () => parseRetrySchedule(raw.retrySchedule));
  const allow = raw.allowCidrs.length === 0 ? undefined : attempt(errors, () => parseAllowCidrs(raw.allowCidrs));
  crossChecks(input, errors);
  const refused = { errors, warnings, loaded: [] };
  if (errors.length > 0 || forward === undefined || publicUrl === undefined || keys === undefined) return refused;
  if (schedule === undefined || signing === undefined) return refused;
  if (raw.allowCidrs.length > 0 && allow === undefined) return refused;
  const config: PostbackConfig = {
    ...withoutConsumed(raw, CONSUMED),
    forwardUrl: forward,
    listen: { ...raw.listen, host: raw.listen.host.trim() },
    publicUrl,
    publicKeys: keys,
    publicKeyFile: raw.publicKeyFile === '' ? undefined : raw.publicKeyFile,
    allowCidrs: allow,
    delivery: resolveDelivery(raw.delivery, input),
    orderField: raw.orderField.trim(),
    retryScheduleMs: schedule,
    forwardSecret: signing.secret,
    forwardSecretFile: signing.file,
  };
  const loaded =
    signing.file !== undefined && signing.digest !== undefined ? [{ file: signing.file, digest: signing.digest }] : [];
  return { config, errors, warnings, loaded };
}
