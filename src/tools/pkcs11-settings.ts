import type { ConfigError } from '../errors.js';
import { readSecretFile, statSecretFile } from '../config/load.js';
import { buildSchema } from '../config/schema.js';
import { settingValues } from '../config/setting-values.js';
import { loadSignerSettings, type Pkcs11SignerConfig } from '../config/signer-settings.js';

/**
 * The PKCS#11 settings alone, from the same SIDECAR_PKCS11_* variables `serve` reads (the tools need no gateway
 * settings): the config, or every refusal, one line each.
 */
export function pkcs11SettingsFromEnv(
  env: NodeJS.ProcessEnv,
): { readonly config: Pkcs11SignerConfig } | { readonly errors: readonly ConfigError[] } {
  const schema = buildSchema(env);
  const result = loadSignerSettings({
    signer: 'pkcs11',
    privateKeyFile: '',
    pkcs11: settingValues(schema, { env, fileDir: undefined }).pkcs11,
    readFile: readSecretFile,
    statFile: statSecretFile,
  });
  return result.config?.kind === 'pkcs11' ? { config: result.config } : { errors: result.errors };
}
