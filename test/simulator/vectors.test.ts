// The openssl-made known-answer vectors (test/vectors/) against the simulator's own URL rebuild, signing string
// and verifier, first as pure functions and then over HTTP with the simulator's clock set to each vector's time.
import assert from 'node:assert/strict';
import { createPublicKey } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import { parsePublicBase, signedUrlFor } from '../../packages/simulator/src/canonical-url.js';
import { startSimulator } from '@signing-sidecar/simulator';
import { buildSigningString, verifySignature } from '../../packages/simulator/src/verifier.js';
import { PASSWORD, USERNAME, codeOf, login, send } from './support.js';
import type { RunningSimulator } from '@signing-sidecar/simulator';
import { vectorPublicKeyPem, vectors, type SignatureVector } from '../support/vectors.js';

const publicKeyPem = vectorPublicKeyPem;
const publicKey = createPublicKey(publicKeyPem);

/** What the simulator receives when a client posts to base_url + request_target. */
function targetAsReceived(v: SignatureVector): string {
  return parsePublicBase(v.base_url).pathPrefix + v.request_target;
}

describe('known-answer vectors (openssl) against the simulator verifier', () => {
  it('has vectors to check', () => assert.ok(vectors.length >= 8));

  for (const v of vectors) {
    it(`${v.name}: URL, signing string and signature`, async () => {
      assert.equal(signedUrlFor(parsePublicBase(v.base_url), targetAsReceived(v)), v.full_url);
      const signingString = buildSigningString({
        method: v.method,
        fullUrl: v.full_url,
        timestamp: v.timestamp,
        nonce: v.nonce,
        data: v.data,
      });
      assert.equal(signingString, v.signing_string);
      assert.equal(Buffer.from(v.data, 'base64').toString('utf8'), v.payload);
      const signature = Buffer.from(v.signature, 'base64');
      assert.equal(await verifySignature(publicKey, signingString, signature), true);
      const tampered = signingString.replace(v.timestamp, String(Number(v.timestamp) + 1));
      assert.equal(await verifySignature(publicKey, tampered, signature), false);
    });
  }
});

describe('known-answer vectors over HTTP', () => {
  const sims = new Map<string, RunningSimulator>();
  before(async () => {
    for (const base of new Set(vectors.map((v) => v.base_url))) {
      const sim = await startSimulator({
        publicBaseUrl: base,
        accounts: [{ username: USERNAME, password: PASSWORD, publicKeyPem }],
      });
      sims.set(base, sim);
    }
  });
  after(() => Promise.all([...sims.values()].map((s) => s.close())));

  for (const v of vectors) {
    it(`${v.name}: the simulator accepts the openssl signature`, async () => {
      const sim = sims.get(v.base_url);
      assert.ok(sim);
      const token = (await login(sim)).access_token ?? '';
      sim.clock.setOffset(0);
      sim.clock.shift(Number(v.timestamp) - sim.clock.nowSeconds());
      const res = await send(sim.listenUrl, {
        path: targetAsReceived(v),
        headers: {
          'content-type': 'application/json',
          authorization: `Bearer ${token}`,
          'x-timestamp': v.timestamp,
          'x-nonce': v.nonce,
          'x-signature': v.signature,
        },
        body: JSON.stringify({ data: v.data }),
      });
      if (v.request_target.split('?')[0]?.endsWith('/')) {
        // The simulator routes paths exactly; the trailing-slash path is not an endpoint.
        assert.equal(res.status, 404);
        return;
      }
      // Vectors with partial payloads pass the signature and stop at payload validation.
      const full = ['deposit-plain', 'withdrawal-plain'].includes(v.name);
      assert.equal(res.status, full ? 200 : 400, res.text);
      if (!full) assert.match(codeOf(res), /^payload\./);
    });
  }
});
