import { sign, type KeyObject } from 'node:crypto';

export type SignerKind = 'file' | 'pkcs11';

/**
 * The one seam between a request and the private key: a key file (createSigner below) or a PKCS#11 token
 * (pkcs11-signer.ts). Both give byte-identical signatures for the same key: PKCS#1 v1.5 is deterministic.
 */
export interface Signer {
  readonly kind: SignerKind;
  /**
   * Standard base64 (with padding) of RSA PKCS#1 v1.5 SHA-256 over the UTF-8 bytes of the signing string. Rejects
   * with sidecar.signer.unavailable when no signature can be made now (nothing was sent).
   */
  sign(signingString: string): Promise<string>;
  /** Whether a signature can be made now: readiness is false while it cannot. */
  available(): boolean;
}

/** A Signer whose key can be replaced while requests are being signed (secret rotation). */
export interface SwappableSigner extends Signer {
  readonly kind: 'file';
  /** The key the next signature uses; a signature already started finishes with the key it started with. */
  replaceKey(privateKey: KeyObject): void;
  currentKey(): KeyObject;
}

/**
 * Signs on libuv's thread pool (the callback form of crypto.sign), so an RSA operation of ~0.2 ms never blocks
 * the event loop that serves other requests. The key is a parsed KeyObject: no PEM parsing per request.
 * The signer holds no per-request state, so one instance is shared safely by concurrent requests. The key is read
 * once, synchronously, when a signature starts: replaceKey() is atomic for the requests that follow and never
 * changes the key under a signature in progress. Only an `rsa` key is taken (an `rsa-pss` one would sign with PSS,
 * which the gateway refuses).
 */
export function createSigner(privateKey: KeyObject): SwappableSigner {
  let key = pkcs1Key(privateKey);
  return {
    kind: 'file',
    available: () => true,
    replaceKey(next: KeyObject): void {
      key = pkcs1Key(next);
    },
    currentKey: () => key,
    sign(signingString: string): Promise<string> {
      const signingKey = key;
      return new Promise((resolve, reject) => {
        // The KeyObject itself, not `{ key, padding }`: an `rsa` key signs with PKCS#1 v1.5 by default, and Node
        // tells a KeyObject from an options object by catching a TypeError it throws (stack trace included), which
        // cost more main-thread time and heap per signature than the rest of the call (docs/performance.md).
        sign('sha256', Buffer.from(signingString, 'utf8'), signingKey, (err, signature) => {
          if (err) reject(err);
          else resolve(signature.toString('base64'));
        });
      });
    },
  };
}

/** The key, once it is known to sign with PKCS#1 v1.5 by default: an `rsa` key (not `rsa-pss`, not EC). */
function pkcs1Key(key: KeyObject): KeyObject {
  if (key.asymmetricKeyType !== 'rsa')
    throw new TypeError(`the signing key must be an RSA key, not ${key.asymmetricKeyType ?? key.type}`);
  return key;
}
