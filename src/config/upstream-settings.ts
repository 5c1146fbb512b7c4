// The gateway connection's settings (the `upstream` group), validated as one group: load.ts calls
// loadUpstreamSettings and adds its refusals to the others; the forward proxy among them is proxy-settings.ts's.
import type { ConfigError } from '../errors.js';
import type { BaseAddress } from './base-url.js';
import { attempt } from './attempt.js';
import { loadProxySettings, type UpstreamProxyConfig } from './proxy-settings.js';
import { settingName, type GroupConfig, type Settings } from './schema.js';
import { caFromFile, contentDigest, type GroupResult, type ReadSettingFile } from './secret-files.js';

/** What the group's parser makes of the settings it does not use as they are. */
interface UpstreamParsed {
  /** PEM text of the extra CA bundle, if any. */
  readonly ca: string | undefined;
  /** SIDECAR_UPSTREAM_CA_FILE, watched for rotation; undefined when not set. */
  readonly caFile: string | undefined;
  /** The forward proxy the gateway is reached through; undefined: directly. */
  readonly proxy: UpstreamProxyConfig | undefined;
}

/** The gateway connection: timeouts, pool, answer correlation (empty items dropped), CA and forward proxy. */
export type UpstreamConfig = GroupConfig<Settings['upstream'], UpstreamParsed>;

export interface UpstreamInput {
  /** The `upstream` settings after the schema validation (setting-values.ts: paths resolved, lists trimmed). */
  readonly raw: Settings['upstream'];
  /** The gateway, for the forward proxy from HTTPS_PROXY / NO_PROXY; undefined when it was refused. */
  readonly base: BaseAddress | undefined;
  readonly env: NodeJS.ProcessEnv;
  readonly readFile: ReadSettingFile;
}

export type UpstreamResult = GroupResult<UpstreamConfig>;

function caOf(input: UpstreamInput): { ca: string | undefined; caFile: string | undefined; digest?: string } {
  const file = input.raw.caFile;
  if (file === '') return { ca: undefined, caFile: undefined };
  const setting = settingName('upstream.caFile');
  const text = input.readFile(setting, file);
  return { ca: caFromFile(setting, file, text), caFile: file, digest: contentDigest(text) };
}

export function loadUpstreamSettings(input: UpstreamInput): UpstreamResult {
  const errors: ConfigError[] = [];
  const ca = attempt(errors, () => caOf(input));
  const proxy = loadProxySettings({ raw: input.raw.proxy, base: input.base, env: input.env, readFile: input.readFile });
  errors.push(...proxy.errors);
  const loaded = [
    ...(ca?.caFile !== undefined && ca.digest !== undefined ? [{ file: ca.caFile, digest: ca.digest }] : []),
    ...proxy.loaded,
  ];
  if (errors.length > 0 || ca === undefined) return { config: undefined, errors, loaded };
  const config: UpstreamConfig = {
    ...input.raw,
    ca: ca.ca,
    caFile: ca.caFile,
    proxy: proxy.config,
  };
  return { config, errors, loaded };
}
