import assert from 'node:assert/strict';
import { chmod, copyFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { before, describe, it } from 'node:test';
import { loadConfig } from '../../src/config/load.js';
import type { ConfigWarning } from '../../src/config/config-warning.js';
import { fileModeWarning } from '../../src/config/file-mode.js';
import { makeKeys, type TestKeys } from '../support/keys.js';
import { RecordingGateway } from '../support/recording-gateway.js';
import { scratchDir } from '../support/scratch.js';
import { sidecarEnv, startTestSidecar } from '../support/sidecar.js';
import { productionEnv } from './support.js';

const KEY_SETTING = 'SIDECAR_PRIVATE_KEY_FILE (privateKeyFile)';
const PIN_SETTING = 'SIDECAR_PKCS11_PIN_FILE (pkcs11.pinFile)';
const OPEN = /has mode 0644: group\/others can access it; run chmod 600 \(Kubernetes: defaultMode 0440 with fsGroup/;

const modeWarnings = (warnings: readonly ConfigWarning[]) => warnings.filter((w) => w.kind === 'file-mode');

// `serve` logs every config warning at start (app.ts) and `check` judges the same files by the same rule on its
// own lines (test/tools/check.test.ts): here, config load gives the warning, naming the setting.
describe('config: a key file or PIN file open to group/others is warned about at start, naming the setting', () => {
  let keys: TestKeys;
  let dir: string;

  before(async () => {
    keys = await makeKeys();
    dir = scratchDir('file-mode-');
  });

  /** A copy of the test key with `mode`, in its own file. */
  const keyFile = async (name: string, mode: number): Promise<string> => {
    const path = join(dir, name);
    await copyFile(keys.privateKeyFile, path);
    await chmod(path, mode);
    return path;
  };
  const pinFile = async (name: string, mode: number): Promise<string> => {
    const path = join(dir, name);
    await writeFile(path, '1234\n');
    await chmod(path, mode);
    return path;
  };
  /** SIDECAR_SIGNER=pkcs11: the token is opened by the signer at start, not by config load. */
  const pkcs11Env = (pin: string): NodeJS.ProcessEnv => ({
    ...productionEnv(''),
    SIDECAR_PRIVATE_KEY_FILE: undefined,
    SIDECAR_SIGNER: 'pkcs11',
    SIDECAR_PKCS11_MODULE: join(dir, 'no-such-module.so'),
    SIDECAR_PKCS11_TOKEN_LABEL: 'payments',
    SIDECAR_PKCS11_KEY_LABEL: 'gateway',
    SIDECAR_PKCS11_PIN_FILE: pin,
  });

  it('a 0644 key file: one warning naming SIDECAR_PRIVATE_KEY_FILE, the path and the fix', async () => {
    const path = await keyFile('loose.pem', 0o644);
    const warnings = modeWarnings(loadConfig(productionEnv(path)).warnings);
    assert.equal(warnings.length, 1, JSON.stringify(warnings));
    assert.equal(warnings[0]!.setting, KEY_SETTING);
    assert.ok(warnings[0]!.message.startsWith(`${path} has mode 0644`), warnings[0]!.message);
    assert.match(warnings[0]!.message, OPEN);
  });

  it('a 0644 PIN file: one warning naming SIDECAR_PKCS11_PIN_FILE, never the PIN', async () => {
    const path = await pinFile('loose-pin', 0o644);
    const warnings = modeWarnings(loadConfig(pkcs11Env(path)).warnings);
    assert.equal(warnings.length, 1, JSON.stringify(warnings));
    assert.equal(warnings[0]!.setting, PIN_SETTING);
    assert.ok(warnings[0]!.message.startsWith(`${path} has mode 0644`), warnings[0]!.message);
    assert.match(warnings[0]!.message, OPEN);
    assert.ok(!JSON.stringify(warnings).includes('1234'), 'PIN in the warning');
  });

  it('0600 key and PIN files give no warning at all', async () => {
    assert.deepEqual(loadConfig(productionEnv(await keyFile('tight.pem', 0o600))).warnings, []);
    assert.deepEqual(loadConfig(pkcs11Env(await pinFile('tight-pin', 0o600))).warnings, []);
  });

  it("0400, and 0440 for the process's own group (a Kubernetes Secret with fsGroup), give none", async () => {
    for (const mode of [0o400, 0o440]) {
      const octal = mode.toString(8);
      assert.deepEqual(modeWarnings(loadConfig(productionEnv(await keyFile(`key-${octal}.pem`, mode))).warnings), []);
      assert.deepEqual(modeWarnings(loadConfig(pkcs11Env(await pinFile(`pin-${octal}`, mode))).warnings), []);
    }
  });

  it('any bit for others warns (0604, 0602), not only read', async () => {
    for (const mode of [0o604, 0o602]) {
      const path = await keyFile(`key-${mode.toString(8)}.pem`, mode);
      assert.equal(modeWarnings(loadConfig(productionEnv(path)).warnings).length, 1, mode.toString(8));
    }
  });

  it('the rule reads the stat it is given (no warning on Windows, or when the file cannot be stat-ed)', () => {
    const open = () => ({ mode: 0o100644, gid: 0 });
    assert.equal(fileModeWarning(KEY_SETTING, '/k.pem', open)?.setting, KEY_SETTING);
    assert.equal(fileModeWarning(KEY_SETTING, '/k.pem', open, 'win32'), undefined);
    assert.equal(
      fileModeWarning(KEY_SETTING, '/k.pem', () => undefined),
      undefined,
    );
  });

  it('a started sidecar logs the warning at warn level, naming the setting', async () => {
    const gateway = await new RecordingGateway().start();
    const env = await sidecarEnv(keys, gateway.url, {
      SIDECAR_PRIVATE_KEY_FILE: await keyFile('serve-loose.pem', 0o644),
    });
    const running = await startTestSidecar(env);
    try {
      const warnings = running.logs.lines().filter((line) => line.event === 'config.warning');
      assert.equal(warnings.length, 1, running.logs.text);
      assert.equal(warnings[0]!.level, 40, 'warn level');
      assert.equal(warnings[0]!.setting, KEY_SETTING);
      assert.match(String(warnings[0]!.msg), OPEN);
    } finally {
      await running.stop();
      await gateway.stop();
    }
  });
});
