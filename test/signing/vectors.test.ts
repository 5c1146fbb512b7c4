import assert from 'node:assert/strict';
import { createPublicKey, generateKeyPairSync, verify } from 'node:crypto';
import { describe, it } from 'node:test';
import { parseBaseAddress } from '../../src/config/base-url.js';
import { parsePrivateKey } from '../../src/config/private-key.js';
import { signedUrl, splitRequestTarget } from '../../src/signing/canonical-url.js';
import { createSigner } from '../../src/signing/signer.js';
import { signingString } from '../../src/signing/signing-string.js';
import { verifiesWithAny } from '../../src/signing/verify.js';
import { vectorPrivateKeyPem, vectorPublicKeyPem, vectors } from '../support/vectors.js';

describe('known-answer vectors made with the openssl CLI', () => {
  const signer = createSigner(parsePrivateKey(vectorPrivateKeyPem));

  for (const v of vectors) {
    it(`${v.name}: URL, signing string and signature match openssl byte for byte`, async () => {
      const fullUrl = signedUrl(parseBaseAddress(v.base_url), splitRequestTarget(v.request_target));
      assert.equal(fullUrl, v.full_url);
      assert.equal(Buffer.from(v.payload, 'utf8').toString('base64'), v.data);
      const text = signingString({ method: v.method, fullUrl, timestamp: v.timestamp, nonce: v.nonce, data: v.data });
      assert.equal(text, v.signing_string);
      assert.equal(await signer.sign(text), v.signature);
    });
  }

  it('a signature over one altered byte does not verify against the vector public key', () => {
    const v = vectors[0]!;
    const publicKey = createPublicKey(vectorPublicKeyPem);
    const signature = Buffer.from(v.signature, 'base64');
    assert.equal(verify('sha256', Buffer.from(v.signing_string), publicKey, signature), true);
    assert.equal(verify('sha256', Buffer.from(`${v.signing_string}x`), publicKey, signature), false);
  });

  it('the vector signatures verify with the public key as given, and a key of another kind verifies nothing', () => {
    const v = vectors[0]!;
    const signature = Buffer.from(v.signature, 'base64');
    assert.equal(verifiesWithAny([createPublicKey(vectorPublicKeyPem)], v.signing_string, signature), true);
    const pss = generateKeyPairSync('rsa-pss', { modulusLength: 2048 }).publicKey;
    assert.equal(verifiesWithAny([pss], v.signing_string, signature), false);
  });

  it('a key that would not sign PKCS#1 v1.5 by default is refused, at creation and on rotation', () => {
    const pss = generateKeyPairSync('rsa-pss', { modulusLength: 2048 }).privateKey;
    const ec = generateKeyPairSync('ec', { namedCurve: 'P-256' }).privateKey;
    assert.throws(() => createSigner(pss), /must be an RSA key, not rsa-pss/);
    const signer = createSigner(parsePrivateKey(vectorPrivateKeyPem));
    assert.throws(() => signer.replaceKey(ec), /must be an RSA key, not ec/);
    assert.equal(signer.currentKey().asymmetricKeyType, 'rsa', 'the key in use stays');
  });
});
