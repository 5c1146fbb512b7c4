import { constants, verify } from 'node:crypto';
import type { Pkcs11SignerConfig } from '../config/signer-settings.js';
import { ConfigError } from '../errors.js';
import { publicKeyFingerprint } from '../signing/keys.js';
import { loadPkcs11Binding } from '../signing/pkcs11-binding.js';
import { startPkcs11Signer } from '../signing/pkcs11-signer.js';
import type { CheckReport } from './check-report.js';

/** What `check` signs with the token and verifies: never a payment, never sent anywhere. */
const TEST_MESSAGE = 'POST.https://signing-sidecar.invalid/check.0.check.e30=';

/**
 * The module, the token, the key (label, ID, bits, mechanism), then one test signature verified with the public key
 * the token holds. The token is opened exactly as `serve` opens it, and closed again.
 */
export async function checkPkcs11(config: Pkcs11SignerConfig, report: CheckReport): Promise<void> {
  let signer;
  try {
    signer = startPkcs11Signer(
      config,
      {
        onDown: () => undefined,
        onReopenFailed: () => undefined,
        onUp: () => undefined,
      },
      loadPkcs11Binding(),
    );
  } catch (err) {
    if (!(err instanceof ConfigError)) throw err;
    report.line('✘', 'PKCS#11 token', err.message);
    return;
  }
  try {
    report.line('✔', 'PKCS#11 module', config.module);
    report.line('✔', 'PKCS#11 token', `"${signer.tokenLabel}", logged in`);
    const { key } = signer;
    report.line(
      '✔',
      'private key',
      `in the token: label "${key.label}", ID ${key.id || '(none)'}, RSA ${key.bits} bits, ${signer.mechanism}, public key fingerprint ${publicKeyFingerprint(key.publicKey)}`,
    );
    let signature: Buffer;
    try {
      signature = Buffer.from(await signer.sign(TEST_MESSAGE), 'base64');
    } catch {
      report.line('✘', 'test signature', 'the token did not sign (see the sidecar.signer.unavailable runbook)');
      return;
    }
    const valid = verify(
      'sha256',
      Buffer.from(TEST_MESSAGE),
      { key: key.publicKey, padding: constants.RSA_PKCS1_PADDING },
      signature,
    );
    report.line(
      valid ? '✔' : '✘',
      'test signature',
      valid
        ? 'made by the token, verified with its public key'
        : 'made by the token but does not verify with its public key',
    );
  } finally {
    signer.stop();
  }
}
