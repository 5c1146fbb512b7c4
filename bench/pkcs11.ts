// The PKCS#11 phase's token: a SoftHSM2 of the bench's own (never the system's token folder) holding the bench's
// key, imported so that both signers sign with the same 2048-bit key. Skipped, with a printed line, where softhsm2,
// opensc's pkcs11-tool or the pkcs11js binding is missing.
import { execFileSync } from 'node:child_process';
import type { KeyObject } from 'node:crypto';
import { existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { loadPkcs11Binding } from '../src/signing/pkcs11-binding.js';

const MODULES = ['/usr/lib/x86_64-linux-gnu/softhsm/libsofthsm2.so', '/usr/lib/softhsm/libsofthsm2.so'];
const [LABEL, PIN] = ['bench', '1234'];

export interface BenchToken {
  /** The settings that point a sidecar at the token instead of the key file. */
  readonly env: NodeJS.ProcessEnv;
  remove(): void;
}

const onPath = (tool: string): boolean => {
  try {
    execFileSync('sh', ['-c', `command -v ${tool}`], { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
};

/** Why the PKCS#11 phase cannot run here, or undefined. */
export function pkcs11Missing(): string | undefined {
  if (!MODULES.some((path) => existsSync(path))) return 'softhsm2 is not installed (apt-get install softhsm2)';
  if (!onPath('softhsm2-util') || !onPath('pkcs11-tool')) return 'softhsm2-util or pkcs11-tool (opensc) is missing';
  if (loadPkcs11Binding() === undefined) return 'the optional pkcs11js binding is not built here';
  return undefined;
}

/** A token with `key` in it (sensitive, sign only), and the PIN file: removed by remove(). */
export function createBenchToken(key: KeyObject): BenchToken {
  const dir = mkdtempSync(join(tmpdir(), 'sidecar-bench-hsm-'));
  const tokens = join(dir, 'tokens');
  mkdirSync(tokens);
  const conf = join(dir, 'softhsm2.conf');
  writeFileSync(conf, `directories.tokendir = ${tokens}\nobjectstore.backend = file\nlog.level = ERROR\n`);
  const module = MODULES.find((path) => existsSync(path)) ?? '';
  const run = (tool: string, args: string[]) =>
    execFileSync(tool, args, { env: { PATH: process.env.PATH, SOFTHSM2_CONF: conf }, stdio: 'ignore' });
  const der = join(dir, 'key.der');
  try {
    run('softhsm2-util', ['--init-token', '--free', '--label', LABEL, '--so-pin', `so${PIN}`, '--pin', PIN]);
    writeFileSync(der, key.export({ type: 'pkcs1', format: 'der' }), { mode: 0o600 });
    const login = ['--module', module, '--token-label', LABEL, '--login', '--pin', PIN];
    run('pkcs11-tool', [...login, '--write-object', der, '--type', 'privkey', '--label', 'signing', '--usage-sign']);
  } finally {
    rmSync(der, { force: true });
  }
  writeFileSync(join(dir, 'pin'), `${PIN}\n`, { mode: 0o600 });
  return {
    env: {
      SOFTHSM2_CONF: conf,
      SIDECAR_SIGNER: 'pkcs11',
      SIDECAR_PRIVATE_KEY_FILE: '',
      SIDECAR_PKCS11_MODULE: module,
      SIDECAR_PKCS11_TOKEN_LABEL: LABEL,
      SIDECAR_PKCS11_KEY_LABEL: 'signing',
      SIDECAR_PKCS11_PIN_FILE: join(dir, 'pin'),
    },
    remove: () => rmSync(dir, { recursive: true, force: true }),
  };
}
