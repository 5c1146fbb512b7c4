import { ConfigError } from '../errors.js';
import { validatorOf } from './formats.js';
import { isSetting, settingName, SETTINGS, type ConfigSchema, type SettingsTree } from './schema.js';
import { closestKeyHint } from './unknown-names.js';

/** The refusals of the schema validation, and the keys they refused (the checks that read those are skipped). */
export interface SchemaRefusals {
  readonly errors: readonly ConfigError[];
  readonly invalid: ReadonlySet<string>;
}

type Values = Readonly<Record<string, unknown>>;

const isGroup = (value: unknown): value is Values =>
  typeof value === 'object' && value !== null && !Array.isArray(value);

/** The dotted keys of every value under `value`: what a config file wrote that no setting declares. */
function writtenKeys(value: unknown, key: string): string[] {
  if (!isGroup(value) || Object.keys(value).length === 0) return [key];
  return Object.entries(value).flatMap(([name, child]) => writtenKeys(child, `${key}.${name}`));
}

function leafKeys(tree: SettingsTree, prefix: string): string[] {
  return Object.entries(tree).flatMap(([name, node]) => {
    const key = `${prefix}.${name}`;
    return isSetting(node) ? [key] : leafKeys(node, key);
  });
}

const missingError = (key: string): ConfigError =>
  new ConfigError('config', `configuration param '${key}' missing from config, did you override its parent?`);

/**
 * Judges every setting with its own format, as convict's validate({allowed: 'strict'}) does, but one setting at a
 * time, so that each refusal names the env var the operator set: `ENV_VAR (file.key): reason`. Convict reports the
 * same problems, unnamed, in one message; it stays the last word (a disagreement is reported as it says).
 * Messages are convict's own, so they read the same as before it was asked setting by setting.
 */
export function schemaRefusals(schema: ConfigSchema): SchemaRefusals {
  const refused: ConfigError[] = [];
  const missing: ConfigError[] = [];
  const undeclared: ConfigError[] = [];
  const invalid = new Set<string>();
  let requiredUnset = false;

  const walk = (tree: SettingsTree, values: Values, prefix: string): void => {
    for (const [name, node] of Object.entries(tree)) {
      const key = prefix === '' ? name : `${prefix}.${name}`;
      const value = values[name];
      if (isSetting(node)) {
        if (!Object.hasOwn(values, name)) {
          invalid.add(key);
          missing.push(missingError(key));
          continue;
        }
        if (node.required === true && typeof value === 'string' && value.trim() === '') {
          // load.ts refuses it as "is required", in its place among the other refusals.
          requiredUnset = true;
          continue;
        }
        try {
          validatorOf(node.format)(value);
        } catch (err) {
          invalid.add(key);
          const shown = value && node.sensitive !== true ? `: value was ${JSON.stringify(value)}` : '';
          refused.push(new ConfigError(settingName(key), `${(err as Error).message}${shown}`));
        }
      } else if (isGroup(value)) {
        walk(node, value, key);
      } else {
        // The config file wrote a value where a group of settings belongs ("listen: 8080").
        for (const leaf of leafKeys(node, key)) {
          invalid.add(leaf);
          missing.push(missingError(leaf));
        }
        if (value !== undefined) {
          undeclared.push(new ConfigError('config', `configuration param '${key}' not declared in the schema`));
        }
      }
    }
    for (const [name, value] of Object.entries(values)) {
      if (Object.hasOwn(tree, name)) continue;
      for (const key of writtenKeys(value, prefix === '' ? name : `${prefix}.${name}`)) {
        const hint = closestKeyHint(key);
        undeclared.push(new ConfigError('config', `configuration param '${key}' not declared in the schema${hint}`));
      }
    }
  };
  walk(SETTINGS, schema.getProperties(), '');

  const errors = [...refused, ...missing, ...undeclared];
  // A required setting left blank is refused anyway: convict would add its own, unnamed refusal of the same value.
  if (errors.length === 0 && !requiredUnset) {
    try {
      schema.validate({ allowed: 'strict' });
    } catch (err) {
      errors.push(new ConfigError('config', (err as Error).message.replaceAll('\n', '; ')));
    }
  }
  return { errors, invalid };
}
