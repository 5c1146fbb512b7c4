// The signing subsystem at start: the signer the settings ask for (the key file's, or the PKCS#11 token's), its key's
// fingerprint, and the clock correction that X-Timestamp is made with (docs/operations.md).
import type { Config } from '../config/config.js';
import type { Logger } from '../observability/log.js';
import type { SidecarMetrics } from '../observability/metrics.js';
import { ClockCorrection } from '../signing/clock-correction.js';
import { publicKeyFingerprint } from '../signing/keys.js';
import type { Pkcs11Signer } from '../signing/pkcs11-signer.js';
import { createSigner, type SwappableSigner } from '../signing/signer.js';

export interface Signing {
  readonly signer: SwappableSigner | Pkcs11Signer;
  /** The fingerprint of the public key at start (build_info, the start line; a rotation reports its own). */
  readonly fingerprint: string;
  /** The gateway's clock as its answers tell it: X-Timestamp is signed with it. */
  readonly clock: ClockCorrection;
  /** Stops the PKCS#11 token's reopening (nothing to stop for the key file). */
  stop(): void;
}

/**
 * Opens the signer before anything listens: a PKCS#11 token that refuses (PIN, key, module) stops the start with the
 * line that names the setting. The key in use is reported to `metrics` (build_info), now and at each reopen.
 */
export async function openSigning(
  config: Config,
  deps: { readonly metrics: SidecarMetrics; readonly log: Logger },
): Promise<Signing> {
  const { metrics, log } = deps;
  const signer = await signerFor(config, log, (next) => metrics.signingKey(next));
  const fingerprint = publicKeyFingerprint(signer.kind === 'file' ? signer.currentKey() : signer.key.publicKey);
  metrics.signingKey(fingerprint);
  metrics.initSigner(signer.kind);
  return {
    signer,
    fingerprint,
    clock: new ClockCorrection(config.clock, metrics),
    stop: () => {
      if (signer.kind === 'pkcs11') signer.stop();
    },
  };
}

/**
 * The signer the settings ask for: the key file's (crypto.sign on libuv's threads), or the PKCS#11 token's, opened
 * now (rejects a ConfigError naming the setting it refuses). The token's outages are logged: its reason is a CKR_*
 * name, never anything the module wrote.
 */
async function signerFor(
  config: Config,
  log: Logger,
  onKey: (fingerprint: string) => void,
): Promise<SwappableSigner | Pkcs11Signer> {
  if (config.signer.kind === 'file') return createSigner(config.signer.privateKey);
  // Loaded only for this signer: a pod signing with its key file does not carry the PKCS#11 code.
  const [{ startPkcs11Signer }, { loadPkcs11Binding }] = await Promise.all([
    import('../signing/pkcs11-signer.js'),
    import('../signing/pkcs11-binding.js'),
  ]);
  return startPkcs11Signer(
    config.signer,
    {
      onDown: (reason) =>
        log.error(
          { event: 'signer.down', signer: 'pkcs11', reason },
          'the PKCS#11 token failed a signature: requests are answered 503 sidecar.signer.unavailable (nothing sent) until it is open again',
        ),
      onReopenFailed: (reason) =>
        log.error(
          { event: 'signer.reopen_failed', signer: 'pkcs11', reason },
          'the PKCS#11 token cannot be opened yet; retrying with backoff',
        ),
      onUp: (keyFingerprint) => {
        onKey(keyFingerprint);
        log.info(
          { event: 'signer.up', signer: 'pkcs11', keyFingerprint },
          'the PKCS#11 token is open again: signing resumed',
        );
      },
    },
    loadPkcs11Binding(),
  );
}
