// Two simulators as staging and production: a request signed for one environment and sent to the other fails
// with signature.verify.failed, and the refusal names the URL the server expected.
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { codeOf, login, makeKeys, signedPost, startWithAccount } from './support.js';
import type { TestKeys } from './support.js';
import type { RunningSimulator } from '@signing-sidecar/simulator';

describe('environment mismatch', () => {
  let keys: TestKeys;
  let staging: RunningSimulator;
  let production: RunningSimulator;
  before(async () => {
    keys = await makeKeys();
    [staging, production] = await Promise.all([
      startWithAccount(keys, { publicBaseUrl: 'https://staging.gateway.example' }),
      startWithAccount(keys, { publicBaseUrl: 'https://GATEWAY.example:443' }),
    ]);
  });
  after(() => Promise.all([staging.close(), production.close()]));

  it('reports its configured public base address, normalised', () => {
    assert.equal(staging.baseUrl, 'https://staging.gateway.example');
    assert.equal(production.baseUrl, 'https://gateway.example');
    assert.notEqual(production.listenUrl, production.baseUrl);
  });

  it('accepts a request signed for its own base address', async () => {
    const token = (await login(production)).access_token ?? '';
    const res = await signedPost(production, { key: keys.privateKey, token });
    assert.equal(res.status, 200, res.text);
  });

  it('refuses a request signed for staging but sent to production', async () => {
    const token = (await login(production)).access_token ?? '';
    const res = await signedPost(production, { key: keys.privateKey, token, signedBase: staging.baseUrl });
    assert.equal(res.status, 401);
    assert.equal(codeOf(res), 'signature.verify.failed');
    assert.match(String(res.json().message), /https:\/\/gateway\.example\/api\/v2\/transaction\/init/);
  });

  it('refuses a request signed for the listen address instead of the public one', async () => {
    const token = (await login(staging)).access_token ?? '';
    const res = await signedPost(staging, { key: keys.privateKey, token, signedBase: staging.listenUrl });
    assert.equal(codeOf(res), 'signature.verify.failed');
  });
});
