// The PKCS#11 signer (docs/operations.md, "The private key in an HSM or a cloud KMS"): the key never leaves the
// token; the sidecar holds a pool of logged-in sessions and asks the token for each signature.
//
// - Each signature takes a free session (one operation at a time per session, PKCS#11 2.40 section 5.6), runs
//   C_SignInit and then C_Sign on libuv's thread pool (the binding's C_SignAsync): the event loop never waits for
//   the token. A request that finds every session busy waits for one, in arrival order.
// - A token error (device error, session closed, token removed) fails that signature with
//   sidecar.signer.unavailable (nothing was sent) and takes the signer down: every waiting and new signature gets
//   the same answer, readiness turns false, and once the signatures in flight have ended the module is finalised and
//   opened again from scratch (C_Initialize rescans the tokens), with backoff, until it works. A PIN the token
//   refused is not tried again until the PIN file changes: tokens lock a user out after a few wrong PINs.
// - The opening calls (C_Initialize, C_OpenSession, C_Login, C_FindObjects) are synchronous: they run at start and
//   at a reopen, never per request.
import { createHash } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { ConfigError, sidecarErrors } from '../errors.js';
import { settingName } from '../config/schema.js';
import type { Pkcs11SignerConfig } from '../config/signer-settings.js';
import type { Secret } from '../config/secret.js';
import { publicKeyFingerprint } from './keys.js';
import { describePkcs11Error, type Handle, type Pkcs11Binding, type Pkcs11Library } from './pkcs11-binding.js';
import {
  finalizeQuietly,
  findSigningKey,
  initialize,
  loadModule,
  openToken,
  type OpenedToken,
  type Pkcs11Mechanism,
  type TokenKey,
} from './pkcs11-token.js';
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
interface Opened {
  readonly token: OpenedToken;
  readonly key: TokenKey;
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
  /** Closes the sessions and finalises the module (shutdown). */
  stop(): void;
}

/** Opens the token, its sessions and its key: one state of the signer. Throws ConfigErrors naming the setting. */
function openAll(binding: Pkcs11Binding, library: Pkcs11Library, config: Pkcs11SignerConfig, pin: Secret): Opened {
  const token = openToken(binding, library, config, pin);
  const key = findSigningKey(token, config.key);
  if (config.publicKey !== undefined && !config.publicKey.equals(key.publicKey)) {
    throw new ConfigError(
      settingName('pkcs11.publicKeyFile'),
      `the token's key (fingerprint ${publicKeyFingerprint(key.publicKey)}) is not this public key (fingerprint ${publicKeyFingerprint(config.publicKey)})`,
    );
  }
  const free = [token.session];
  for (let n = 1; n < config.sessions; n++) {
    try {
      free.push(library.C_OpenSession(token.slot, binding.constants.CKF_SERIAL_SESSION));
    } catch (err) {
      throw new ConfigError(
        settingName('pkcs11.sessions'),
        `the token opened ${n} sessions, not ${config.sessions} (${describePkcs11Error(err)})`,
      );
    }
  }
  return { token, key, free, signatureBytes: Math.ceil(key.bits / 8) };
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
  let opened: Opened | undefined;
  try {
    opened = openAll(loaded, library, config, config.pin);
  } catch (err) {
    finalizeQuietly(library);
    throw err;
  }
  const first = opened;
  let pin = config.pin;
  let refusedPin: string | undefined;
  let inFlight = 0;
  let onIdle: (() => void) | undefined;
  let stopped = false;
  const waiters: Array<{ resolve: (session: Handle) => void; reject: (err: Error) => void }> = [];

  const closeQuietly = (): void => {
    opened = undefined;
    finalizeQuietly(library);
  };

  const reopen = async (): Promise<void> => {
    if (inFlight > 0) await new Promise<void>((resolve) => (onIdle = resolve));
    closeQuietly();
    let delay = REOPEN_FIRST_DELAY_MS;
    let lastReason: string | undefined;
    while (!stopped) {
      await sleep(delay);
      delay = Math.min(delay * 2, REOPEN_MAX_DELAY_MS);
      if (stopped || (refusedPin !== undefined && refusedPin === pinDigest(pin))) continue;
      try {
        initialize(loaded, library);
        opened = openAll(loaded, library, config, pin);
        refusedPin = undefined;
        events.onUp(publicKeyFingerprint(opened.key.publicKey));
        return;
      } catch (err) {
        const reason = err instanceof ConfigError ? err.message : describePkcs11Error(err);
        if (err instanceof ConfigError && err.setting === settingName('pkcs11.pinFile')) refusedPin = pinDigest(pin);
        closeQuietly();
        if (reason !== lastReason) events.onReopenFailed(reason);
        lastReason = reason;
      }
    }
  };

  const goDown = (state: Opened, err: unknown): void => {
    if (opened !== state) return;
    opened = undefined;
    events.onDown(describePkcs11Error(err));
    for (const waiter of waiters.splice(0)) waiter.reject(sidecarErrors.signerUnavailable(err));
    void reopen();
  };

  const acquire = (state: Opened): Promise<Handle> => {
    const session = state.free.pop();
    if (session !== undefined) return Promise.resolve(session);
    return new Promise((resolve, reject) => waiters.push({ resolve, reject }));
  };

  const release = (state: Opened, session: Handle): void => {
    if (opened !== state) return;
    const waiter = waiters.shift();
    if (waiter !== undefined) waiter.resolve(session);
    else state.free.push(session);
  };

  return {
    kind: 'pkcs11',
    key: { label: first.key.label, id: first.key.id, bits: first.key.bits, publicKey: first.key.publicKey },
    tokenLabel: first.token.tokenLabel,
    mechanism: first.token.mechanism,
    available: () => opened !== undefined,
    replacePin(next: Secret): void {
      pin = next;
    },
    stop(): void {
      stopped = true;
      for (const waiter of waiters.splice(0)) waiter.reject(sidecarErrors.signerUnavailable());
      if (inFlight === 0) closeQuietly();
      else onIdle = closeQuietly;
    },
    async sign(signingString: string): Promise<string> {
      const state = opened;
      if (state === undefined || stopped) throw sidecarErrors.signerUnavailable();
      const session = await acquire(state);
      // The token went down (and may be open again, with new handles) while this one waited for a session.
      if (opened !== state) throw sidecarErrors.signerUnavailable();
      const { library: lib, binding: b, mechanism } = state.token;
      const input = signInput(mechanism, Buffer.from(signingString, 'utf8'));
      inFlight++;
      try {
        lib.C_SignInit(session, { mechanism: b.constants[mechanism] }, state.key.handle);
        const signature = await lib.C_SignAsync(session, input, Buffer.alloc(state.signatureBytes));
        release(state, session);
        return signature.toString('base64');
      } catch (err) {
        // The session is not given back: the whole state is closed and opened again.
        goDown(state, err);
        throw sidecarErrors.signerUnavailable(err);
      } finally {
        // `input` stays referenced until the token has finished with it (the binding keeps no reference).
        input.fill(0, 0, 0);
        if (--inFlight === 0 && onIdle !== undefined) {
          const idle = onIdle;
          onIdle = undefined;
          idle();
        }
      }
    },
  };
}
