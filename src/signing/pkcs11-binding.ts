// The PKCS#11 binding, pkcs11js (PeculiarVentures, the base of graphene-pk11): an optional dependency, built by
// node-gyp at install. A machine without a compiler installs everything else and runs the file signer; only
// SIDECAR_SIGNER=pkcs11 needs it, and says so in one line when it is missing. Declared here as the few calls the
// sidecar makes, rather than through the package's own types, so that the sidecar type-checks without it.
import { createRequire } from 'node:module';
import { errorName } from '../errors.js';

/** A slot, session or object handle: the binding's 8-byte buffer. */
export type Handle = Buffer;

export interface Pkcs11Attribute {
  readonly type: number;
  readonly value?: number | boolean | string | Buffer;
}

/** The calls of pkcs11js's PKCS11 class the sidecar makes (pkcs11js index.d.ts). */
export interface Pkcs11Library {
  load(path: string): void;
  C_Initialize(options?: { flags?: number }): void;
  C_Finalize(): void;
  C_GetSlotList(tokenPresent: boolean): Handle[];
  C_GetTokenInfo(slot: Handle): { readonly label: string };
  C_GetMechanismList(slot: Handle): number[];
  C_OpenSession(slot: Handle, flags: number): Handle;
  C_CloseAllSessions(slot: Handle): void;
  C_Login(session: Handle, userType: number, pin: string): void;
  C_FindObjectsInit(session: Handle, template: readonly Pkcs11Attribute[]): void;
  C_FindObjects(session: Handle, maxObjectCount: number): Handle[];
  C_FindObjectsFinal(session: Handle): void;
  C_GetAttributeValue(
    session: Handle,
    object: Handle,
    template: readonly Pkcs11Attribute[],
  ): Array<{ type: number; value: Buffer }>;
  C_SignInit(session: Handle, mechanism: { mechanism: number }, key: Handle): void;
  /**
   * C_Sign on libuv's thread pool (napi_create_async_work in pkcs11js's src/worker.cpp): the event loop never
   * waits for the token. The binding keeps no reference to `inData` while the call runs: the caller must.
   */
  C_SignAsync(session: Handle, inData: Buffer, outData: Buffer): Promise<Buffer>;
  C_GenerateKeyPairAsync(
    session: Handle,
    mechanism: { mechanism: number },
    publicKeyTemplate: readonly Pkcs11Attribute[],
    privateKeyTemplate: readonly Pkcs11Attribute[],
  ): Promise<{ privateKey: Handle; publicKey: Handle }>;
}

/** The constants the sidecar uses, by their PKCS#11 names, as pkcs11js exports them. */
const CONSTANT_NAMES = [
  'CKA_CLASS',
  'CKA_LABEL',
  'CKA_ID',
  'CKA_KEY_TYPE',
  'CKA_SIGN',
  'CKA_VERIFY',
  'CKA_MODULUS',
  'CKA_MODULUS_BITS',
  'CKA_PUBLIC_EXPONENT',
  'CKA_TOKEN',
  'CKA_PRIVATE',
  'CKA_SENSITIVE',
  'CKA_EXTRACTABLE',
  'CKA_DECRYPT',
  'CKA_ENCRYPT',
  'CKA_WRAP',
  'CKA_UNWRAP',
  'CKA_DERIVE',
  'CKO_PRIVATE_KEY',
  'CKO_PUBLIC_KEY',
  'CKK_RSA',
  'CKM_RSA_PKCS',
  'CKM_SHA256_RSA_PKCS',
  'CKM_RSA_PKCS_KEY_PAIR_GEN',
  'CKF_SERIAL_SESSION',
  'CKF_OS_LOCKING_OK',
  'CKF_RW_SESSION',
  'CKU_USER',
] as const;

export type Pkcs11Constant = (typeof CONSTANT_NAMES)[number];

export interface Pkcs11Binding {
  /** A new, unloaded library object: load(path), then C_Initialize(). */
  newLibrary(): Pkcs11Library;
  readonly constants: Readonly<Record<Pkcs11Constant, number>>;
}

/** What a missing binding is called in the refusal: the one line `serve` prints. */
export const MISSING_BINDING =
  'needs the optional package pkcs11js, which is not installed or did not build on this machine ' +
  '(`npm install pkcs11js` builds it with python3, make and a C++ compiler)';

/** The binding, or undefined when pkcs11js is not installed or its native part did not build. */
export function loadPkcs11Binding(): Pkcs11Binding | undefined {
  let module: Record<string, unknown>;
  try {
    module = createRequire(import.meta.url)('pkcs11js') as Record<string, unknown>;
  } catch {
    return undefined;
  }
  const Library = module.PKCS11 as (new () => Pkcs11Library) | undefined;
  if (typeof Library !== 'function') return undefined;
  const constants = {} as Record<Pkcs11Constant, number>;
  for (const name of CONSTANT_NAMES) {
    const value = module[name];
    if (typeof value !== 'number') return undefined;
    constants[name] = value;
  }
  return { newLibrary: () => new Library(), constants };
}

/** The CKR_* name of a binding error ("CKR_PIN_INCORRECT"), or undefined for any other error. */
export function pkcs11ErrorName(err: unknown): string | undefined {
  const message = err instanceof Error ? err.message : '';
  return /\b(CKR_[A-Z0-9_]+)/.exec(message)?.[1];
}

/** How a binding error is named in logs and refusals: its CKR_* name, else its kind; never more of its text. */
export function describePkcs11Error(err: unknown): string {
  return pkcs11ErrorName(err) ?? errorName(err);
}
