// Opening a PKCS#11 token: the module, the token, the login, the key and its checks. Shared by the signer (at
// start and at every reopen), `check` and `keygen --pkcs11`. Every refusal is a ConfigError naming the setting to
// fix; the PIN is never part of any message, nor is anything the module says beyond its CKR_* name.
import { createPublicKey, type KeyObject } from 'node:crypto';
import { existsSync } from 'node:fs';
import { ConfigError } from '../errors.js';
import { MIN_RSA_BITS } from '../config/private-key.js';
import { publicKeyFingerprint } from './keys.js';
import { settingName } from '../config/schema.js';
import type { Pkcs11KeySelector, Pkcs11SignerConfig } from '../config/signer-settings.js';
import type { Secret } from '../config/secret.js';
import {
  describePkcs11Error,
  MISSING_BINDING,
  pkcs11ErrorName,
  type Handle,
  type Pkcs11Attribute,
  type Pkcs11Binding,
  type Pkcs11Library,
} from './pkcs11-binding.js';

export type Pkcs11Mechanism = 'CKM_SHA256_RSA_PKCS' | 'CKM_RSA_PKCS';

/** Where the token is and how to reach it, as the settings say. */
export type TokenSettings = Pick<Pkcs11SignerConfig, 'module' | 'token'>;

/** A logged-in token: its library, slot, first session (more can be opened on the slot). */
export interface OpenedToken {
  readonly library: Pkcs11Library;
  readonly binding: Pkcs11Binding;
  readonly slot: Handle;
  readonly session: Handle;
  readonly tokenLabel: string;
  /** The combined mechanism, or the raw one over a DigestInfo where the token lacks it (several cloud modules). */
  readonly mechanism: Pkcs11Mechanism;
}

/** The signing key found in the token, checked. */
export interface TokenKey {
  readonly handle: Handle;
  readonly label: string;
  /** CKA_ID, hex. */
  readonly id: string;
  readonly bits: number;
  readonly publicKey: KeyObject;
}

const name = (key: string): string => settingName(`pkcs11.${key}`);

/** How the key's settings are named in its refusals: the label, the ID, or both as they were set. */
export function keySettingName(key: Pkcs11KeySelector): string {
  const names = [];
  if (key.label !== undefined) names.push(name('keyLabel'));
  if (key.id !== undefined) names.push(name('keyId'));
  return names.join(' / ');
}

/** Loads and initialises the module; throws a ConfigError naming SIDECAR_SIGNER or SIDECAR_PKCS11_MODULE. */
export function loadModule(
  binding: Pkcs11Binding | undefined,
  path: string,
): { readonly binding: Pkcs11Binding; readonly library: Pkcs11Library } {
  if (binding === undefined) throw new ConfigError(settingName('signer'), `pkcs11 ${MISSING_BINDING}`);
  if (!existsSync(path)) throw new ConfigError(name('module'), `no file at ${path}`);
  const library = binding.newLibrary();
  try {
    library.load(path);
  } catch {
    throw new ConfigError(name('module'), `${path} is not a PKCS#11 library (it has no C_GetFunctionList)`);
  }
  try {
    initialize(binding, library);
  } catch (err) {
    throw new ConfigError(name('module'), `${path}: C_Initialize failed (${describePkcs11Error(err)})`);
  }
  return { binding, library };
}

/**
 * C_Initialize with CKF_OS_LOCKING_OK: signatures run on several of libuv's threads at once, and a module
 * initialised with no arguments may assume one thread only (PKCS#11 2.40 section 5.4; SoftHSM2 then takes no
 * locks, and concurrent signatures corrupt its state).
 */
export function initialize(binding: Pkcs11Binding, library: Pkcs11Library): void {
  library.C_Initialize({ flags: binding.constants.CKF_OS_LOCKING_OK });
}

/** Finalises a library, ignoring what a broken token answers: it is being let go. */
export function finalizeQuietly(library: Pkcs11Library): void {
  try {
    library.C_Finalize();
  } catch {
    // Already finalised, or the device is gone: nothing more to release.
  }
}

function findSlot(library: Pkcs11Library, token: TokenSettings['token']): { slot: Handle; label: string } {
  const slots = library.C_GetSlotList(true);
  const labelled = slots.map((slot) => ({ slot, label: library.C_GetTokenInfo(slot).label.trim() }));
  if ('label' in token) {
    const found = labelled.filter(({ label }) => label === token.label);
    if (found.length === 1 && found[0] !== undefined) return found[0];
    // An uninitialised token (SoftHSM2's free slot) has an empty label: not a token anyone could mean.
    const seen =
      labelled
        .filter(({ label }) => label !== '')
        .map(({ label }) => `"${label}"`)
        .join(', ') || 'none';
    throw new ConfigError(
      name('tokenLabel'),
      found.length === 0
        ? `no token labelled "${token.label}" (tokens present: ${seen})`
        : `${found.length} tokens are labelled "${token.label}"; set ${settingName('pkcs11.slot')} instead`,
    );
  }
  const wanted = BigInt(token.slot);
  const found = labelled.find(({ slot }) => slot.readBigUInt64LE(0) === wanted);
  if (found === undefined) throw new ConfigError(name('slot'), `no token in slot ${token.slot}`);
  return found;
}

/** Opens the token and logs in with the PIN: a session ready to find keys and sign. */
export function openToken(
  binding: Pkcs11Binding,
  library: Pkcs11Library,
  settings: TokenSettings,
  pin: Secret,
  options: { readonly readWrite?: boolean } = {},
): OpenedToken {
  const c = binding.constants;
  const { slot, label } = findSlot(library, settings.token);
  const tokenName = 'label' in settings.token ? name('tokenLabel') : name('slot');
  const mechanisms = library.C_GetMechanismList(slot);
  const mechanism: Pkcs11Mechanism | undefined = mechanisms.includes(c.CKM_SHA256_RSA_PKCS)
    ? 'CKM_SHA256_RSA_PKCS'
    : mechanisms.includes(c.CKM_RSA_PKCS)
      ? 'CKM_RSA_PKCS'
      : undefined;
  if (mechanism === undefined) {
    throw new ConfigError(tokenName, `token "${label}" offers neither CKM_SHA256_RSA_PKCS nor CKM_RSA_PKCS`);
  }
  let session: Handle;
  try {
    session = library.C_OpenSession(slot, c.CKF_SERIAL_SESSION | (options.readWrite === true ? c.CKF_RW_SESSION : 0));
  } catch (err) {
    throw new ConfigError(tokenName, `cannot open a session on token "${label}" (${describePkcs11Error(err)})`);
  }
  try {
    library.C_Login(session, c.CKU_USER, pin.reveal());
  } catch (err) {
    const code = pkcs11ErrorName(err);
    // Another session of this process logged in already: the login is the token's, shared by every session.
    if (code !== 'CKR_USER_ALREADY_LOGGED_IN') {
      const reason =
        code === 'CKR_PIN_INCORRECT'
          ? 'the token refused the PIN (CKR_PIN_INCORRECT)'
          : code === 'CKR_PIN_LOCKED'
            ? 'the PIN is locked on the token (CKR_PIN_LOCKED): the token officer must unlock it'
            : `login to token "${label}" failed (${code ?? describePkcs11Error(err)})`;
      throw new ConfigError(name('pinFile'), reason);
    }
  }
  return { library, binding, slot, session, tokenLabel: label, mechanism };
}

function findObjects(token: OpenedToken, template: readonly Pkcs11Attribute[]): Handle[] {
  const { library, session } = token;
  library.C_FindObjectsInit(session, template);
  try {
    return library.C_FindObjects(session, 2);
  } finally {
    library.C_FindObjectsFinal(session);
  }
}

function selectorTemplate(token: OpenedToken, objectClass: number, key: Pkcs11KeySelector): Pkcs11Attribute[] {
  const c = token.binding.constants;
  const template: Pkcs11Attribute[] = [{ type: c.CKA_CLASS, value: objectClass }];
  if (key.label !== undefined) template.push({ type: c.CKA_LABEL, value: key.label });
  if (key.id !== undefined) template.push({ type: c.CKA_ID, value: key.id });
  return template;
}

function attributes(token: OpenedToken, object: Handle, types: readonly number[]): Map<number, Buffer> | undefined {
  try {
    const values = token.library.C_GetAttributeValue(
      token.session,
      object,
      types.map((type) => ({ type })),
    );
    return new Map(values.map(({ type, value }) => [type, value]));
  } catch {
    return undefined;
  }
}

/**
 * The public half from the private key object's modulus and exponent (PKCS#11 makes them readable on an RSA private
 * key), else from the public key object of the same label and ID: some modules keep them there only.
 */
function publicKeyOf(token: OpenedToken, privateKey: Handle, key: Pkcs11KeySelector): KeyObject | undefined {
  const c = token.binding.constants;
  const read = (object: Handle) => attributes(token, object, [c.CKA_MODULUS, c.CKA_PUBLIC_EXPONENT]);
  let values = read(privateKey);
  if (values === undefined) {
    const [publicObject] = findObjects(token, selectorTemplate(token, c.CKO_PUBLIC_KEY, key));
    values = publicObject === undefined ? undefined : read(publicObject);
  }
  const n = values?.get(c.CKA_MODULUS);
  const e = values?.get(c.CKA_PUBLIC_EXPONENT);
  if (n === undefined || e === undefined) return undefined;
  return createPublicKey({
    key: { kty: 'RSA', n: n.toString('base64url'), e: e.toString('base64url') },
    format: 'jwk',
  });
}

/** The one private key the selector names, an RSA key of at least 2048 bits allowed to sign. */
export function findSigningKey(token: OpenedToken, key: Pkcs11KeySelector): TokenKey {
  const c = token.binding.constants;
  const setting = keySettingName(key);
  const found = findObjects(token, selectorTemplate(token, c.CKO_PRIVATE_KEY, key));
  const [handle] = found;
  if (handle === undefined) {
    throw new ConfigError(setting, `no private key in token "${token.tokenLabel}" matches ${describeSelector(key)}`);
  }
  if (found.length > 1) {
    throw new ConfigError(
      setting,
      `more than one private key in token "${token.tokenLabel}" matches ${describeSelector(key)}; set both the label and the ID`,
    );
  }
  const values = attributes(token, handle, [c.CKA_KEY_TYPE, c.CKA_SIGN, c.CKA_LABEL, c.CKA_ID]);
  const keyType = values?.get(c.CKA_KEY_TYPE);
  if (keyType === undefined || readUlong(keyType) !== c.CKK_RSA) {
    throw new ConfigError(setting, 'the key is not an RSA key: RSA required (spec 5.2: RSA, PKCS#1 v1.5, SHA-256)');
  }
  if (values?.get(c.CKA_SIGN)?.[0] !== 1)
    throw new ConfigError(setting, 'the key is not allowed to sign (CKA_SIGN is false)');
  const publicKey = publicKeyOf(token, handle, key);
  if (publicKey === undefined)
    throw new ConfigError(setting, 'the token shows neither the modulus nor a public key object of this key');
  const bits = publicKey.asymmetricKeyDetails?.modulusLength ?? 0;
  if (bits < MIN_RSA_BITS) throw new ConfigError(setting, `key is ${bits} bits; at least ${MIN_RSA_BITS} are required`);
  return {
    handle,
    label: values?.get(c.CKA_LABEL)?.toString('utf8') ?? '',
    id: values?.get(c.CKA_ID)?.toString('hex') ?? '',
    bits,
    publicKey,
  };
}

function describeSelector(key: Pkcs11KeySelector): string {
  const parts = [];
  if (key.label !== undefined) parts.push(`label "${key.label}"`);
  if (key.id !== undefined) parts.push(`ID ${key.id.toString('hex')}`);
  return parts.join(' and ');
}

/** A CK_ULONG attribute value: the platform's unsigned long, little-endian on every platform Node runs on. */
function readUlong(value: Buffer): number {
  return value.length >= 8 ? Number(value.readBigUInt64LE(0)) : value.readUInt32LE(0);
}

/** What a signer opens: the token logged in, its key, and the pool of sessions signatures take turns on. */
export interface SigningSessions {
  readonly token: OpenedToken;
  readonly key: TokenKey;
  /** `config.sessions` of them, the token's first session included. */
  readonly sessions: Handle[];
}

/** The settings a signer opens its token with (the PIN apart: it is rotated). */
export type SigningSettings = Pick<Pkcs11SignerConfig, 'module' | 'token' | 'key' | 'sessions' | 'publicKey'>;

/** Opens the token, its key and its sessions, for the signer. Throws ConfigErrors naming the setting. */
export function openForSigning(
  binding: Pkcs11Binding,
  library: Pkcs11Library,
  settings: SigningSettings,
  pin: Secret,
): SigningSessions {
  const token = openToken(binding, library, settings, pin);
  const key = findSigningKey(token, settings.key);
  if (settings.publicKey !== undefined && !settings.publicKey.equals(key.publicKey)) {
    throw new ConfigError(
      settingName('pkcs11.publicKeyFile'),
      `the token's key (fingerprint ${publicKeyFingerprint(key.publicKey)}) is not this public key (fingerprint ${publicKeyFingerprint(settings.publicKey)})`,
    );
  }
  const sessions = [token.session];
  for (let n = 1; n < settings.sessions; n++) {
    try {
      sessions.push(library.C_OpenSession(token.slot, binding.constants.CKF_SERIAL_SESSION));
    } catch (err) {
      throw new ConfigError(
        name('sessions'),
        `the token opened ${n} sessions, not ${settings.sessions} (${describePkcs11Error(err)})`,
      );
    }
  }
  return { token, key, sessions };
}
