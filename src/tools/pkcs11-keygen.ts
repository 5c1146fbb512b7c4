import { randomBytes, type KeyObject } from 'node:crypto';
import type { Pkcs11SignerConfig } from '../config/signer-settings.js';
import { ConfigError } from '../errors.js';
import { loadPkcs11Binding } from '../signing/pkcs11-binding.js';
import { finalizeQuietly, findSigningKey, keySettingName, loadModule, openToken } from '../signing/pkcs11-token.js';

export interface GeneratedTokenKey {
  readonly tokenLabel: string;
  readonly label: string;
  /** CKA_ID, hex. */
  readonly id: string;
  readonly bits: number;
  readonly publicKey: KeyObject;
}

const RSA_PUBLIC_EXPONENT = Buffer.from([0x01, 0x00, 0x01]);

/**
 * Generates an RSA pair inside the token: the private key stays there for good (CKA_SENSITIVE, not extractable,
 * CKA_SIGN only: no decrypt, unwrap or derive), the public key is returned for the account manager. An existing
 * key with the same label or ID is never replaced. Without a key ID in the settings, a random 8-byte one is given.
 * Throws a ConfigError naming the setting.
 */
export async function generateTokenKey(config: Pkcs11SignerConfig, bits: number): Promise<GeneratedTokenKey> {
  const { binding, library } = loadModule(loadPkcs11Binding(), config.module);
  try {
    const token = openToken(binding, library, config, config.pin, { readWrite: true });
    const c = token.binding.constants;
    const label = config.key.label;
    const id = config.key.id ?? randomBytes(8);
    for (const selector of [
      { label, id: undefined },
      { label: undefined, id },
    ]) {
      if (selector.label === undefined && selector.id === undefined) continue;
      let exists = true;
      try {
        findSigningKey(token, selector);
      } catch (err) {
        exists = !(err instanceof ConfigError && /no private key/.test(err.message));
      }
      if (exists) {
        throw new ConfigError(
          keySettingName(selector),
          'a private key with this label or ID exists already in the token; it is never replaced',
        );
      }
    }
    const common = [
      { type: c.CKA_TOKEN, value: true },
      { type: c.CKA_ID, value: id },
      ...(label === undefined ? [] : [{ type: c.CKA_LABEL, value: label }]),
    ];
    await library.C_GenerateKeyPairAsync(
      token.session,
      { mechanism: c.CKM_RSA_PKCS_KEY_PAIR_GEN },
      [
        ...common,
        { type: c.CKA_MODULUS_BITS, value: bits },
        { type: c.CKA_PUBLIC_EXPONENT, value: RSA_PUBLIC_EXPONENT },
        { type: c.CKA_VERIFY, value: true },
        { type: c.CKA_ENCRYPT, value: false },
        { type: c.CKA_WRAP, value: false },
      ],
      [
        ...common,
        { type: c.CKA_PRIVATE, value: true },
        { type: c.CKA_SENSITIVE, value: true },
        { type: c.CKA_EXTRACTABLE, value: false },
        { type: c.CKA_SIGN, value: true },
        { type: c.CKA_DECRYPT, value: false },
        { type: c.CKA_UNWRAP, value: false },
        { type: c.CKA_DERIVE, value: false },
      ],
    );
    const key = findSigningKey(token, { label, id });
    return { tokenLabel: token.tokenLabel, label: key.label, id: key.id, bits: key.bits, publicKey: key.publicKey };
  } finally {
    finalizeQuietly(library);
  }
}
