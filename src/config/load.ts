import { readFileSync } from 'node:fs';
import convict from 'convict';
import { parse as parseYaml } from 'yaml';
import { ConfigError } from '../errors.js';
import { parseBaseAddress } from './base-url.js';
import type { Config, LogLevel } from './config.js';
import { parsePrivateKey } from './private-key.js';
import { buildSchema, type ConfigSchema } from './schema.js';
import { Secret } from './secret.js';

convict.addParser([
  { extension: 'json', parse: JSON.parse },
  { extension: ['yml', 'yaml'], parse: parseYaml },
]);

/** The env var that sets a schema key, so every refusal names what the operator actually sets. */
function settingName(schema: ConfigSchema, key: string): string {
  let node: unknown = schema.getSchema();
  for (const part of key.split('.')) {
    node = (node as { _cvtProperties?: Record<string, unknown> })._cvtProperties?.[part];
  }
  const env = (node as { env?: string } | undefined)?.env;
  return env ? `${env} (${key})` : key;
}

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

function required(schema: ConfigSchema, key: 'baseUrl' | 'environment' | 'username' | 'privateKeyFile'): string {
  const value = schema.get(key);
  if (value.trim() === '') throw new ConfigError(settingName(schema, key), 'is required');
  return value.trim();
}

function loadSchema(env: NodeJS.ProcessEnv): ConfigSchema {
  // convict applies env vars over the file, which gives defaults < file < env.
  const schema = buildSchema(env);
  const file = env.SIDECAR_CONFIG_FILE;
  if (file) {
    try {
      schema.loadFile(file);
    } catch (err) {
      throw new ConfigError('SIDECAR_CONFIG_FILE', `cannot load ${file}: ${describeFileError(err)}`);
    }
  }
  try {
    schema.validate({ allowed: 'strict' });
  } catch (err) {
    const first = (err as Error).message.split('\n')[0] ?? 'invalid';
    // convict starts with the key ("listen.port: must be ..."); the operator set an env var, so name that.
    const keyed = /^([A-Za-z][\w.]*): (.+)$/.exec(first);
    if (keyed !== null) throw new ConfigError(settingName(schema, keyed[1]!), keyed[2]!);
    throw new ConfigError('config', first);
  }
  return schema;
}

function loadPassword(schema: ConfigSchema): Secret {
  const file = schema.get('passwordFile').trim();
  if (file !== '') {
    // Secret files often end with a newline written by editors or `echo`; it is never part of the password.
    const value = readSecretFile(settingName(schema, 'passwordFile'), file).replace(/\r?\n$/, '');
    if (value === '') throw new ConfigError(settingName(schema, 'passwordFile'), `file ${file} is empty`);
    return new Secret(value);
  }
  const inline = schema.get('password');
  if (inline === '') throw new ConfigError('SIDECAR_PASSWORD_FILE / SIDECAR_PASSWORD', 'one of them is required');
  return new Secret(inline);
}

/** Loads and validates every setting; throws ConfigError naming the first offending setting. */
export function loadConfig(env: NodeJS.ProcessEnv): Config {
  const schema = loadSchema(env);
  const baseUrlRaw = required(schema, 'baseUrl');
  let base;
  try {
    base = parseBaseAddress(baseUrlRaw);
  } catch (err) {
    throw new ConfigError(settingName(schema, 'baseUrl'), (err as Error).message);
  }
  const environment = required(schema, 'environment');
  if (environment !== 'staging' && environment !== 'production') {
    throw new ConfigError(settingName(schema, 'environment'), `must be staging or production, not "${environment}"`);
  }
  if (environment === 'production' && base.protocol !== 'https:') {
    throw new ConfigError(settingName(schema, 'baseUrl'), 'production requires an https:// base address');
  }
  const username = required(schema, 'username');
  const password = loadPassword(schema);
  const privateKeyFile = required(schema, 'privateKeyFile');
  const keySetting = settingName(schema, 'privateKeyFile');
  let privateKey;
  try {
    privateKey = parsePrivateKey(readSecretFile(keySetting, privateKeyFile));
  } catch (err) {
    if (err instanceof ConfigError) throw err;
    throw new ConfigError(keySetting, `${privateKeyFile}: ${(err as Error).message}`);
  }
  const caFile = schema.get('upstream.caFile').trim();
  const ca = caFile === '' ? undefined : readSecretFile(settingName(schema, 'upstream.caFile'), caFile);
  if (ca !== undefined && !ca.includes('-----BEGIN CERTIFICATE-----')) {
    throw new ConfigError(settingName(schema, 'upstream.caFile'), `${caFile} holds no PEM certificate`);
  }
  const token = schema.get('token');
  if (token.refreshAheadMinSeconds > token.refreshAheadMaxSeconds) {
    throw new ConfigError(
      settingName(schema, 'token.refreshAheadMinSeconds'),
      'must not exceed SIDECAR_TOKEN_REFRESH_AHEAD_MAX_SECONDS',
    );
  }
  const routes = schema
    .get('signedRoutes')
    .map((r: unknown) => String(r).trim())
    .filter((r: string) => r !== '');
  for (const route of routes) {
    if (!route.startsWith('/') || /[?#]/.test(route)) {
      throw new ConfigError(
        settingName(schema, 'signedRoutes'),
        `"${route}" must be a path starting with / without query`,
      );
    }
  }
  const correlationFields = schema
    .get('upstream.answerCorrelationFields')
    .map((field: unknown) => String(field).trim())
    .filter((field: string) => field !== '');
  return {
    base,
    environment: environment,
    username,
    password,
    privateKey,
    privateKeyFile,
    listen: schema.get('listen'),
    admin: schema.get('admin'),
    upstream: { ...schema.get('upstream'), ca, answerCorrelationFields: correlationFields },
    signedRoutes: routes,
    maxBodyBytes: schema.get('maxBodyBytes'),
    token,
    shutdown: schema.get('shutdown'),
    logLevel: schema.get('logLevel') as LogLevel,
  };
}
