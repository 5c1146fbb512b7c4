// The PKCS#11 signer (docs/operations.md, "The private key in an HSM or a cloud KMS"): the key never leaves the
// token; the sidecar holds a pool of logged-in sessions and asks the token for each signature.
//
// - Each signature takes a free session (one operation at a time per session, PKCS#11 2.40 section 5.6) and runs
//   C_SignInit, then C_Sign, on the token's thread (pkcs11-thread.ts; C_Sign on libuv's thread pool): the event loop
//   never waits for the token. A request that finds every session busy waits for one, in arrival order.
// - A token error (device error, session closed, token removed) fails that signature with
//   sidecar.signer.unavailable (nothing was sent) and takes the signer down: every waiting and new signature gets
//   the same answer, readiness turns false, and once the signatures in flight have ended the token's thread finalises
//   the module and opens it again from scratch (C_Initialize rescans the tokens), with backoff, until it works. A PIN
//   the token refused is not tried again until the PIN file changes: tokens lock a user out after a few wrong PINs.
// - The token is first opened at start, on the main thread, before anything is served: `serve` then refuses to start
//   with the line that names the setting.
import { createHash } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { ConfigError, sidecarErrors } from '../errors.js';
import { settingName } from '../config/schema.js';
import type { Pkcs11SignerConfig } from '../config/signer-settings.js';
import type { Secret } from '../config/secret.js';
import { publicKeyFingerprint } from './keys.js';
import { describePkcs11Error, type Handle, type Pkcs11Binding } from './pkcs11-binding.js';
import { Pkcs11Thread, type OpenState } from './pkcs11-thread.js';
import { finalizeQuietly, loadModule, openForSigning, type Pkcs11Mechanism, type TokenKey } from './pkcs11-token.js';
import type { Signer } from './signer.js';

/** DER of DigestInfo{sha256, NULL} before the 32 digest bytes (RFC 8017 section 9.2, note 1). */
const SHA256_DIGEST_INFO_PREFIX = Buffer.from('3031300d060960864801650304020105000420', 'hex');
const REOPEN_FIRST_DELAY_MS = 100;
const REOPEN_MAX_DELAY_MS = 5_000;

/** What the signer reports as it goes down and comes back: logged by start/signing.ts, a reopened key reported. */
export interface Pkcs11SignerEvents {
  /** A signature failed: no signature can be made until the token is opened again. `reason`: a CKR_* name. */
  readonly onDown: (reason: string) => void;
  /** An attempt to open the token again failed (reported once per distinct reason). */
  readonly onReopenFailed: (reason: string) => void;
  /** The token is open again: the key's fingerprint (it may be another key if the token's changed). */
  readonly onUp: (keyFingerprint: string) => void;
}

/** One open state of the token: its sessions, its key. A reopen makes a new one. */
interface Opened extends OpenState {
  readonly free: Handle[];
  readonly signatureBytes: number;
}

export interface Pkcs11Signer extends Signer {
  readonly kind: 'pkcs11';
  /** The token's key as opened at start: its public half, bits, label and ID (for logs, `check`). */
  readonly key: Omit<TokenKey, 'handle'>;
  readonly tokenLabel: string;
  readonly mechanism: Pkcs11Mechanism;
  /** The PIN the next session opens with (SIDECAR_PKCS11_PIN_FILE rotated). */
  replacePin(pin: Secret): void;
  /** Closes the sessions, finalises the module and ends the token's thread (shutdown). */
  stop(): void;
}

function opened(state: OpenState): Opened {
  return { ...state, free: [...state.sessions], signatureBytes: Math.ceil(state.key.bits / 8) };
}

/** The input C_Sign takes for this mechanism: the message, or the DigestInfo of its SHA-256. */
function signInput(mechanism: Pkcs11Mechanism, message: Buffer): Buffer {
  if (mechanism === 'CKM_SHA256_RSA_PKCS') return message;
  return Buffer.concat([SHA256_DIGEST_INFO_PREFIX, createHash('sha256').update(message).digest()]);
}

const pinDigest = (pin: Secret): string => createHash('sha256').update(pin.reveal()).digest('hex');

/**
 * Opens the token at start (synchronously, so `serve` refuses to start with the line that names the setting) and
 * returns the signer. Throws a ConfigError.
 */
export function startPkcs11Signer(
  config: Pkcs11SignerConfig,
  events: Pkcs11SignerEvents,
  /** loadPkcs11Binding(): undefined when pkcs11js is not installed. */
  binding: Pkcs11Binding | undefined,
): Pkcs11Signer {
  const { library, binding: loaded } = loadModule(binding, config.module);
  let state: Opened | undefined;
  try {
    const { token, key, sessions } = openForSigning(loaded, library, config, config.pin);
    state = opened({ tokenLabel: token.tokenLabel, mechanism: token.mechanism, key, sessions });
  } catch (err) {
    finalizeQuietly(library);
    throw err;
  }
  const first = state;
  const thread = new Pkcs11Thread(config);
  let pin = config.pin;
  let refusedPin: string | undefined;
  let inFlight = 0;
  /** Runs once no signature and no reopen is in flight. */
  let onIdle: (() => void) | undefined;
  let reopening = false;
  let stopped = false;
  const waiters: Array<{ resolve: (session: Handle) => void; reject: (err: Error) => void }> = [];

  const idle = (): void => {
    if (inFlight > 0 || reopening || onIdle === undefined) return;
    const run = onIdle;
    onIdle = undefined;
    run();
  };

  // The module is finalised from this thread once nothing is in flight on the token's: it is the process's.
  const close = (): void => {
    state = undefined;
    finalizeQuietly(library);
    thread.stop();
  };

  const reopen = async (): Promise<void> => {
    reopening = true;
    try {
      let delay = REOPEN_FIRST_DELAY_MS;
      let lastReason: string | undefined;
      while (!stopped) {
        await sleep(delay);
        delay = Math.min(delay * 2, REOPEN_MAX_DELAY_MS);
        if (stopped || (refusedPin !== undefined && refusedPin === pinDigest(pin))) continue;
        try {
          state = opened(await thread.reopen(pin));
          refusedPin = undefined;
          if (stopped) return;
          events.onUp(publicKeyFingerprint(state.key.publicKey));
          return;
        } catch (err) {
          const reason = err instanceof ConfigError ? err.message : describePkcs11Error(err);
          if (err instanceof ConfigError && err.setting === settingName('pkcs11.pinFile')) refusedPin = pinDigest(pin);
          if (reason !== lastReason) events.onReopenFailed(reason);
          lastReason = reason;
        }
      }
    } finally {
      reopening = false;
      idle();
    }
  };

  const goDown = (down: Opened, err: unknown): void => {
    if (state !== down) return;
    state = undefined;
    for (const waiter of waiters.splice(0)) waiter.reject(sidecarErrors.signerUnavailable(err));
    // Stopped: the token is closed once idle, as stop() asked, not reopened (and no outage is reported).
    if (stopped) return idle();
    events.onDown(describePkcs11Error(err));
    onIdle = () => void reopen();
    idle();
  };

  const acquire = (current: Opened): Promise<Handle> => {
    const session = current.free.pop();
    if (session !== undefined) return Promise.resolve(session);
    return new Promise((resolve, reject) => waiters.push({ resolve, reject }));
  };

  const release = (current: Opened, session: Handle): void => {
    if (state !== current) return;
    const waiter = waiters.shift();
    if (waiter !== undefined) waiter.resolve(session);
    else current.free.push(session);
  };

  return {
    kind: 'pkcs11',
    key: { label: first.key.label, id: first.key.id, bits: first.key.bits, publicKey: first.key.publicKey },
    tokenLabel: first.tokenLabel,
    mechanism: first.mechanism,
    available: () => state !== undefined,
    replacePin(next: Secret): void {
      pin = next;
    },
    stop(): void {
      stopped = true;
      for (const waiter of waiters.splice(0)) waiter.reject(sidecarErrors.signerUnavailable());
      onIdle = close;
      idle();
    },
    async sign(signingString: string): Promise<string> {
      const current = state;
      if (current === undefined || stopped) throw sidecarErrors.signerUnavailable();
      const session = await acquire(current);
      // The token went down (and may be open again, with new handles) while this one waited for a session.
      if (state !== current) throw sidecarErrors.signerUnavailable();
      const input = signInput(current.mechanism, Buffer.from(signingString, 'utf8'));
      inFlight++;
      try {
        const signature = await thread.sign(
          session,
          current.key.handle,
          current.mechanism,
          input,
          current.signatureBytes,
        );
        release(current, session);
        return signature.toString('base64');
      } catch (err) {
        // The session is not given back: the whole state is closed and opened again.
        goDown(current, err);
        throw sidecarErrors.signerUnavailable(err);
      } finally {
        inFlight--;
        idle();
      }
    },
  };
}
