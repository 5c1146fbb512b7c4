// The settings' values as the groups read them: convict's (defaults < file < env, judged by schema-refusals.ts), with
// what a format asks of every setting of it done here, once, from the schema, so that no group lists its own: a file
// path written in the config file resolves against the file's folder, a list's items are trimmed and empty ones
// dropped. A value the schema refused is left as it is (the checks that would read it are skipped).
import { resolve } from 'node:path';
import { isSetting, SETTINGS, type ConfigSchema, type Setting, type Settings, type SettingsTree } from './schema.js';

/** Where the values came from: what decides how a relative path resolves. */
export interface ValueSources {
  readonly env: NodeJS.ProcessEnv;
  /** Folder of SIDECAR_CONFIG_FILE, when one was loaded. */
  readonly fileDir: string | undefined;
}

type Values = Readonly<Record<string, unknown>>;

const isGroup = (value: unknown): value is Values =>
  typeof value === 'object' && value !== null && !Array.isArray(value);

function valueOf(setting: Setting, value: unknown, sources: ValueSources): unknown {
  if (setting.format === 'file-path' && typeof value === 'string') {
    const path = value.trim();
    // A path from an env var stays relative to the working directory, like any path a shell gives a program.
    const fromEnv = sources.env[setting.env] !== undefined;
    return path === '' || fromEnv || sources.fileDir === undefined ? path : resolve(sources.fileDir, path);
  }
  if (setting.format === 'text-list' && Array.isArray(value)) {
    return value.map((item) => String(item).trim()).filter((item) => item !== '');
  }
  return value;
}

function valuesOf(tree: SettingsTree, values: Values, sources: ValueSources): Values {
  const result: Record<string, unknown> = { ...values };
  for (const [name, node] of Object.entries(tree)) {
    if (!Object.hasOwn(values, name)) continue;
    const value = values[name];
    if (isSetting(node)) result[name] = valueOf(node, value, sources);
    else if (isGroup(value)) result[name] = valuesOf(node, value, sources);
  }
  return result;
}

/** Every setting's value, each format's treatment applied. */
export function settingValues(schema: ConfigSchema, sources: ValueSources): Settings {
  // The schema declares the shape and convict filled it; the values refused by the schema keep their wrong type.
  return valuesOf(SETTINGS, schema.getProperties(), sources) as Settings;
}
