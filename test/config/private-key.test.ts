import assert from 'node:assert/strict';
import { generateKeyPairSync } from 'node:crypto';
import { describe, it } from 'node:test';
import { parsePrivateKey } from '../../src/config/private-key.js';

// serve, check and sign all read the private key through parsePrivateKey: a key of the wrong kind is named.
describe('parsePrivateKey: a key that is not RSA is named, not called unreadable', () => {
  const ec = generateKeyPairSync('ec', { namedCurve: 'P-256' }).privateKey;
  const ed = generateKeyPairSync('ed25519').privateKey;
  for (const [what, pem, name] of [
    ['EC, OpenSSL form (EC PRIVATE KEY)', ec.export({ type: 'sec1', format: 'pem' }).toString(), 'an EC key'],
    ['EC, PKCS#8', ec.export({ type: 'pkcs8', format: 'pem' }).toString(), 'an EC key'],
    ['Ed25519, PKCS#8', ed.export({ type: 'pkcs8', format: 'pem' }).toString(), 'an Ed25519 key'],
  ] as const) {
    it(what, () => {
      assert.throws(() => parsePrivateKey(pem), {
        message: `${name}: RSA required (spec 5.2: RSA, PKCS#1 v1.5, SHA-256)`,
      });
    });
  }

  it('an RSA key of 2048 bits is accepted', () => {
    const rsa = generateKeyPairSync('rsa', { modulusLength: 2048 }).privateKey;
    assert.equal(parsePrivateKey(rsa.export({ type: 'pkcs8', format: 'pem' }).toString()).asymmetricKeyType, 'rsa');
  });
});
