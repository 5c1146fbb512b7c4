// Which signer holds the private key (docs/operations.md, "The private key in an HSM or a cloud KMS"), validated as
// one group: load.ts calls loadSignerSettings and adds its refusals and warnings to the others. The key file is read
// and checked here, and the key file's or the PIN file's mode warned about (file-mode.ts); the PKCS#11 token is
// opened later, by the signer itself (src/signing/pkcs11-signer.ts), because opening it loads a native library and
// logs in: what the token refuses is reported with the same setting names.
import type { KeyObject } from 'node:crypto';
import { ConfigError } from '../errors.js';
import { attempt } from './attempt.js';
import type { ConfigWarning } from './config-warning.js';
import { fileModeWarning, type StatSettingFile } from './file-mode.js';
import { parsePublicKeys } from './public-keys.js';
import { envVarOf, settingName, type Settings } from './schema.js';
import {
  contentDigest,
  passwordFromFile,
  privateKeyFromFile,
  type GroupResult,
  type LoadedFile,
  type ReadSettingFile,
} from './secret-files.js';
import type { Secret } from './secret.js';

export interface FileSignerConfig {
  readonly kind: 'file';
  readonly privateKey: KeyObject;
  readonly privateKeyFile: string;
}

/** Where the key is in the token: by label, by CKA_ID, or both (then both must match). */
export interface Pkcs11KeySelector {
  readonly label: string | undefined;
  /** CKA_ID bytes. */
  readonly id: Buffer | undefined;
}

export interface Pkcs11SignerConfig {
  readonly kind: 'pkcs11';
  readonly module: string;
  /** The token by its label, or by its slot ID (decimal text, as `pkcs11-tool -L` prints it). */
  readonly token: { readonly label: string } | { readonly slot: string };
  readonly key: Pkcs11KeySelector;
  readonly pin: Secret;
  readonly pinFile: string;
  /** How many sessions the pool holds: the most signatures at once. */
  readonly sessions: number;
  /** SIDECAR_PUBLIC_KEY_FILE: the token's key must be this one. */
  readonly publicKey: KeyObject | undefined;
}

export type SignerConfig = FileSignerConfig | Pkcs11SignerConfig;

export interface SignerInput {
  readonly signer: Settings['signer'];
  /** The settings of both signers, file paths resolved. */
  readonly privateKeyFile: string;
  readonly pkcs11: Settings['pkcs11'];
  readonly readFile: ReadSettingFile;
  /** Stats the key file or the PIN file once read, for the mode warning. */
  readonly statFile: StatSettingFile;
}

export type SignerResult = GroupResult<SignerConfig> & {
  /** The key file or the PIN file open to group or others (file-mode.ts). */
  readonly warnings: readonly ConfigWarning[];
};

/** Reads a file that signs payments (the key, the PIN) and adds its mode warning, if any. */
function readSigningFile(input: SignerInput, setting: string, file: string, warnings: ConfigWarning[]): string {
  const text = input.readFile(setting, file);
  const warning = fileModeWarning(setting, file, input.statFile);
  if (warning !== undefined) warnings.push(warning);
  return text;
}

const PKCS11_KEYS = [
  'module',
  'tokenLabel',
  'slot',
  'keyLabel',
  'keyId',
  'pinFile',
  'sessions',
  'publicKeyFile',
] as const;

const pkcs11Name = (key: (typeof PKCS11_KEYS)[number]): string => settingName(`pkcs11.${key}`);

/** libuv's own default size of its thread pool. */
const DEFAULT_SIGNING_THREADS = 4;

/** How many signatures libuv's thread pool runs at once: its size (UV_THREADPOOL_SIZE, 4 by default). */
export function signingThreads(env: NodeJS.ProcessEnv = process.env): number {
  const size = Number(env.UV_THREADPOOL_SIZE);
  return Number.isInteger(size) && size > 0 ? Math.min(size, 1024) : DEFAULT_SIGNING_THREADS;
}

/** SIDECAR_PKCS11_PIN_FILE: one trailing newline dropped, empty refused (as the password file). */
export function pinFromFile(setting: string, file: string, text: string): Secret {
  return passwordFromFile(setting, file, text);
}

/** SIDECAR_PUBLIC_KEY_FILE: exactly one RSA public key of at least 2048 bits. */
export function publicKeyFromFile(setting: string, file: string, text: string): KeyObject {
  let keys: KeyObject[];
  try {
    keys = parsePublicKeys(text);
  } catch (err) {
    throw new ConfigError(setting, `${file} ${(err as Error).message}`);
  }
  const [key] = keys;
  if (key === undefined || keys.length > 1) throw new ConfigError(setting, `${file} must hold exactly one public key`);
  return key;
}

function loadFileSigner(input: SignerInput, errors: ConfigError[], warnings: ConfigWarning[]): SignerResult {
  const setting = settingName('privateKeyFile');
  const set = PKCS11_KEYS.filter((key) => input.pkcs11[key] !== '' && input.pkcs11[key] !== 'auto');
  for (const key of set)
    errors.push(new ConfigError(pkcs11Name(key), `is a pkcs11 setting; ${envVarOf('signer')} is file`));
  const loaded: LoadedFile[] = [];
  const privateKey = attempt(errors, () => {
    const file = input.privateKeyFile;
    if (file === '') throw new ConfigError(setting, `is required (or set ${envVarOf('signer')}=pkcs11)`);
    const text = readSigningFile(input, setting, file, warnings);
    loaded.push({ file, digest: contentDigest(text) });
    return privateKeyFromFile(setting, file, text);
  });
  if (errors.length > 0 || privateKey === undefined) return { config: undefined, errors, warnings, loaded };
  return { config: { kind: 'file', privateKey, privateKeyFile: input.privateKeyFile }, errors, warnings, loaded };
}

function loadPkcs11Signer(input: SignerInput, errors: ConfigError[], warnings: ConfigWarning[]): SignerResult {
  const raw = input.pkcs11;
  const refuse = (setting: string, reason: string) => errors.push(new ConfigError(setting, reason));
  if (input.privateKeyFile !== '') {
    // The key file would sit beside an HSM key that the operator believes is the only copy: refused, not ignored.
    refuse(settingName('privateKeyFile'), `is a file signer setting; ${envVarOf('signer')} is pkcs11`);
  }
  const module = raw.module.trim();
  if (module === '') refuse(pkcs11Name('module'), 'is required with SIDECAR_SIGNER=pkcs11');
  const tokenLabel = raw.tokenLabel.trim();
  const slot = raw.slot.trim();
  if ((tokenLabel === '') === (slot === '')) {
    refuse(`${pkcs11Name('tokenLabel')} / ${pkcs11Name('slot')}`, 'set exactly one of them');
  } else if (slot !== '' && !/^\d+$/.test(slot)) {
    refuse(pkcs11Name('slot'), 'must be a decimal slot ID (as `pkcs11-tool -L` prints it)');
  }
  const keyLabel = raw.keyLabel === '' ? undefined : raw.keyLabel;
  const keyIdText = raw.keyId.trim().replace(/^0x/i, '').replaceAll(':', '');
  let keyId: Buffer | undefined;
  if (keyIdText !== '') {
    if (!/^([0-9a-f]{2})+$/i.test(keyIdText)) refuse(pkcs11Name('keyId'), 'must be hex, an even number of digits');
    else keyId = Buffer.from(keyIdText, 'hex');
  }
  if (keyLabel === undefined && raw.keyId.trim() === '') {
    refuse(`${pkcs11Name('keyLabel')} / ${pkcs11Name('keyId')}`, 'set one of them (or both)');
  }
  const sessions = raw.sessions === 'auto' ? signingThreads() : raw.sessions;
  if (sessions === 0) refuse(pkcs11Name('sessions'), 'must be auto or at least 1');
  const loaded: LoadedFile[] = [];
  const pin = attempt(errors, () => {
    const setting = pkcs11Name('pinFile');
    if (raw.pinFile === '') throw new ConfigError(setting, 'is required with SIDECAR_SIGNER=pkcs11');
    const text = readSigningFile(input, setting, raw.pinFile, warnings);
    loaded.push({ file: raw.pinFile, digest: contentDigest(text) });
    return pinFromFile(setting, raw.pinFile, text);
  });
  const publicKey = attempt(errors, () => {
    if (raw.publicKeyFile === '') return undefined;
    const setting = pkcs11Name('publicKeyFile');
    return publicKeyFromFile(setting, raw.publicKeyFile, input.readFile(setting, raw.publicKeyFile));
  });
  if (errors.length > 0 || pin === undefined) return { config: undefined, errors, warnings, loaded };
  const config: Pkcs11SignerConfig = {
    kind: 'pkcs11',
    module,
    token: tokenLabel === '' ? { slot } : { label: tokenLabel },
    key: { label: keyLabel, id: keyId },
    pin,
    pinFile: raw.pinFile,
    sessions,
    publicKey,
  };
  return { config, errors, warnings, loaded };
}

export function loadSignerSettings(input: SignerInput): SignerResult {
  const errors: ConfigError[] = [];
  const warnings: ConfigWarning[] = [];
  return input.signer === 'pkcs11'
    ? loadPkcs11Signer(input, errors, warnings)
    : loadFileSigner(input, errors, warnings);
}
