import { constants, sign, type KeyObject } from 'node:crypto';

export interface Signer {
  /** Standard base64 (with padding) of RSA PKCS#1 v1.5 SHA-256 over the UTF-8 bytes of the signing string. */
  sign(signingString: string): Promise<string>;
}

/**
 * Signs on libuv's thread pool (the callback form of crypto.sign), so an RSA operation of ~0.2 ms never blocks
 * the event loop that serves other requests. The key is a parsed KeyObject: no PEM parsing per request.
 * The signer holds no per-request state, so one instance is shared safely by concurrent requests.
 */
export function createSigner(privateKey: KeyObject): Signer {
  return {
    sign(signingString: string): Promise<string> {
      return new Promise((resolve, reject) => {
        // RSA keys default to PKCS#1 v1.5 padding; it is stated anyway because PSS would fail verification.
        sign(
          'sha256',
          Buffer.from(signingString, 'utf8'),
          { key: privateKey, padding: constants.RSA_PKCS1_PADDING },
          (err, signature) => {
            if (err) reject(err);
            else resolve(signature.toString('base64'));
          },
        );
      });
    },
  };
}
