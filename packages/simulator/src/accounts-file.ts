// Reads the simulator's accounts file (JSON or YAML; YAML is a superset of JSON so one parser reads both).
// Key and password files are resolved against the accounts file's folder, so a checked-in fixture folder works
// from any working directory.
import { readFile } from 'node:fs/promises';
import { dirname, resolve } from 'node:path';
import { parse } from 'yaml';
import { AccountConfigError } from './accounts.js';
import type { SimulatorAccountInput } from './accounts.js';

type Raw = Record<string, unknown>;

export async function readAccountsFile(path: string): Promise<SimulatorAccountInput[]> {
  const text = await readFile(path, 'utf8');
  let doc: unknown;
  try {
    doc = parse(text);
  } catch (err) {
    throw new AccountConfigError(`${path}: not valid JSON or YAML (${(err as Error).message})`);
  }
  const list = isRecord(doc) ? doc.accounts : undefined;
  if (!Array.isArray(list)) throw new AccountConfigError(`${path}: expected a top-level "accounts" list`);
  const base = dirname(resolve(path));
  return Promise.all(list.map((entry: unknown, i) => readEntry(entry, i, base, path)));
}

async function readEntry(entry: unknown, index: number, base: string, file: string): Promise<SimulatorAccountInput> {
  const where = `${file}: accounts[${index}]`;
  if (!isRecord(entry)) throw new AccountConfigError(`${where} is not an object`);
  return {
    username: str(entry, 'username', where) ?? '',
    password: (await fromValueOrFile(entry, 'password', base, where)) ?? '',
    publicKeyPem: (await fromValueOrFile(entry, 'public_key', base, where, '_pem')) ?? '',
    allowIps: strList(entry, 'allow_ips', where),
    webhookUrl: str(entry, 'webhook_url', where),
    signedPostbacks: bool(entry, 'signed_postbacks', where),
  };
}

/** `password` or `password_file`; `public_key_pem` or `public_key_file`. */
async function fromValueOrFile(
  entry: Raw,
  name: string,
  base: string,
  where: string,
  inlineSuffix = '',
): Promise<string | undefined> {
  const inline = str(entry, name + inlineSuffix, where);
  const file = str(entry, `${name}_file`, where);
  if (inline !== undefined && file !== undefined) {
    throw new AccountConfigError(`${where}: give ${name}${inlineSuffix} or ${name}_file, not both`);
  }
  if (file === undefined) return inline;
  const content = await readFile(resolve(base, file), 'utf8');
  // Secret files usually end with a newline the user never meant as part of the password.
  return name === 'password' ? content.replace(/\r?\n$/, '') : content;
}

function str(entry: Raw, key: string, where: string): string | undefined {
  const value = entry[key];
  if (value === undefined || value === null) return undefined;
  if (typeof value !== 'string') throw new AccountConfigError(`${where}.${key} must be a string`);
  return value;
}

function strList(entry: Raw, key: string, where: string): string[] | undefined {
  const value = entry[key];
  if (value === undefined || value === null) return undefined;
  if (!Array.isArray(value) || !value.every((v): v is string => typeof v === 'string')) {
    throw new AccountConfigError(`${where}.${key} must be a list of strings`);
  }
  return value;
}

function bool(entry: Raw, key: string, where: string): boolean | undefined {
  const value = entry[key];
  if (value === undefined || value === null) return undefined;
  if (typeof value !== 'boolean') throw new AccountConfigError(`${where}.${key} must be true or false`);
  return value;
}

function isRecord(value: unknown): value is Raw {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}
