// Real SoftHSM2 tokens for the PKCS#11 signer's tests (Debian's softhsm2 and opensc: `npm test` installs them).
// Each test file makes its own token folder and SOFTHSM2_CONF under a scratch directory: the system's token
// folder (/var/lib/softhsm/tokens) is never touched.
import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, readdirSync, renameSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { loadPkcs11Binding } from '../../src/signing/pkcs11-binding.js';
import { scratchDir } from './scratch.js';

/** Where Debian installs the module (the multiarch path first, the compatibility link second). */
const MODULE_PATHS = ['/usr/lib/x86_64-linux-gnu/softhsm/libsofthsm2.so', '/usr/lib/softhsm/libsofthsm2.so'];

export const SOFTHSM_MODULE = MODULE_PATHS.find((path) => existsSync(path)) ?? MODULE_PATHS[1]!;

/**
 * Why these tests cannot run here, or undefined. SoftHSM2 and opensc missing is a failure (`npm test` installs
 * them); only the binding may be missing, on a machine without a compiler, where the file signer is all there is.
 */
export function pkcs11SkipReason(): string | undefined {
  return loadPkcs11Binding() === undefined
    ? 'pkcs11js is not built on this machine (an optional dependency: npm install pkcs11js needs a compiler)'
    : undefined;
}

export interface SoftHsm {
  /** The folder of this SoftHSM2's configuration and tokens. */
  readonly dir: string;
  readonly tokensDir: string;
  /** SOFTHSM2_CONF=... for every process that opens these tokens (the sidecar's included). */
  readonly env: { readonly SOFTHSM2_CONF: string };
  readonly module: string;
}

/** A SoftHSM2 of its own: a config file and an empty token folder. */
export function newSoftHsm(): SoftHsm {
  const dir = scratchDir('softhsm-');
  const tokensDir = join(dir, 'tokens');
  mkdirSync(tokensDir);
  const conf = join(dir, 'softhsm2.conf');
  writeFileSync(
    conf,
    `directories.tokendir = ${tokensDir}\nobjectstore.backend = file\nlog.level = ERROR\nslots.removable = false\n`,
  );
  return { dir, tokensDir, env: { SOFTHSM2_CONF: conf }, module: SOFTHSM_MODULE };
}

const run = (hsm: SoftHsm, tool: string, args: readonly string[]): string =>
  execFileSync(tool, args, {
    env: { PATH: process.env.PATH, ...hsm.env },
    encoding: 'utf8',
    stdio: ['ignore', 'pipe', 'pipe'],
    timeout: 60_000,
  });

/** A new token with this label, user PIN and SO PIN, made by softhsm2-util. */
export function initToken(hsm: SoftHsm, label: string, pin: string): void {
  run(hsm, 'softhsm2-util', ['--init-token', '--free', '--label', label, '--so-pin', `so-${pin}`, '--pin', pin]);
}

/** An RSA pair generated inside the token by opensc's pkcs11-tool (never a file). */
export function pkcs11ToolKeyPair(
  hsm: SoftHsm,
  token: { label: string; pin: string },
  key: { label: string; id: string; bits: number },
): void {
  run(hsm, 'pkcs11-tool', [
    '--module',
    hsm.module,
    '--token-label',
    token.label,
    '--login',
    '--pin',
    token.pin,
    '--keypairgen',
    '--key-type',
    `rsa:${key.bits}`,
    '--label',
    key.label,
    '--id',
    key.id,
    '--usage-sign',
  ]);
}

/**
 * An RSA pair whose private key may decrypt but not sign (CKA_SIGN false), generated in the token through the
 * binding itself: pkcs11-tool leaves CKA_SIGN at SoftHSM2's default (true) whatever --usage-* says.
 */
export async function decryptOnlyKeyPair(
  hsm: SoftHsm,
  token: { label: string; pin: string },
  key: { label: string; id: string },
): Promise<void> {
  const binding = loadPkcs11Binding();
  if (binding === undefined) throw new Error('pkcs11js is not built');
  const c = binding.constants;
  const library = binding.newLibrary();
  library.load(hsm.module);
  library.C_Initialize({ flags: c.CKF_OS_LOCKING_OK });
  try {
    const slot = library.C_GetSlotList(true).find((s) => library.C_GetTokenInfo(s).label.trim() === token.label);
    if (slot === undefined) throw new Error(`no token ${token.label}`);
    const session = library.C_OpenSession(slot, c.CKF_SERIAL_SESSION | c.CKF_RW_SESSION);
    library.C_Login(session, c.CKU_USER, token.pin);
    const common = [
      { type: c.CKA_TOKEN, value: true },
      { type: c.CKA_LABEL, value: key.label },
      { type: c.CKA_ID, value: Buffer.from(key.id, 'hex') },
    ];
    await library.C_GenerateKeyPairAsync(
      session,
      { mechanism: c.CKM_RSA_PKCS_KEY_PAIR_GEN },
      [
        ...common,
        { type: c.CKA_MODULUS_BITS, value: 2048 },
        { type: c.CKA_PUBLIC_EXPONENT, value: Buffer.from([1, 0, 1]) },
        { type: c.CKA_ENCRYPT, value: true },
      ],
      [
        ...common,
        { type: c.CKA_PRIVATE, value: true },
        { type: c.CKA_SIGN, value: false },
        { type: c.CKA_DECRYPT, value: true },
      ],
    );
  } finally {
    library.C_Finalize();
  }
}

/** The user PIN changed in the token by pkcs11-tool (another process, as a token officer would). */
export function changePin(hsm: SoftHsm, token: { label: string; pin: string }, newPin: string): void {
  run(hsm, 'pkcs11-tool', [
    '--module',
    hsm.module,
    '--token-label',
    token.label,
    '--login',
    '--pin',
    token.pin,
    '--change-pin',
    '--new-pin',
    newPin,
  ]);
}

/** A private key written into the token from DER by pkcs11-tool (for the byte-for-byte comparison with a file). */
export function importPrivateKey(
  hsm: SoftHsm,
  token: { label: string; pin: string },
  key: { label: string; id: string; derFile: string },
): void {
  run(hsm, 'pkcs11-tool', [
    '--module',
    hsm.module,
    '--token-label',
    token.label,
    '--login',
    '--pin',
    token.pin,
    '--write-object',
    key.derFile,
    '--type',
    'privkey',
    '--label',
    key.label,
    '--id',
    key.id,
    '--usage-sign',
  ]);
}

/**
 * Takes every token away (the device unplugged, the HSM partition gone) and gives a function that brings them back
 * exactly as they were.
 */
export function removeTokens(hsm: SoftHsm): () => void {
  const away = `${hsm.tokensDir}.away`;
  renameSync(hsm.tokensDir, away);
  mkdirSync(hsm.tokensDir);
  return () => {
    for (const entry of readdirSync(hsm.tokensDir)) throw new Error(`unexpected token ${entry} while removed`);
    execFileSync('rmdir', [hsm.tokensDir]);
    renameSync(away, hsm.tokensDir);
  };
}
