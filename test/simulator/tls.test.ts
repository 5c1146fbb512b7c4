// HTTPS with a generated throwaway CA: trusted when the client is given caPem, refused otherwise.
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { PASSWORD, USERNAME, login, makeKeys, send, signedPost, startWithAccount } from './support.js';
import type { TestKeys } from './support.js';
import type { RunningSimulator } from '@signing-sidecar/simulator';

describe('TLS', () => {
  let keys: TestKeys;
  let sim: RunningSimulator;
  before(async () => {
    keys = await makeKeys();
    sim = await startWithAccount(keys, { tls: true });
  });
  after(() => sim.close());

  it('serves HTTPS and reports the CA to trust', () => {
    assert.match(sim.listenUrl, /^https:\/\/127\.0\.0\.1:\d+$/);
    assert.equal(sim.baseUrl, sim.listenUrl);
    assert.match(sim.caPem ?? '', /BEGIN CERTIFICATE/);
  });

  it('accepts a signed request over HTTPS from a client that trusts the CA', async () => {
    const ca = sim.caPem;
    const tokenRes = await send(sim.listenUrl, {
      path: '/api/v2/auth/token',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ grant_type: 'password', username: USERNAME, password: PASSWORD }),
      ca,
    });
    assert.equal(tokenRes.status, 200);
    const token = String(tokenRes.json().access_token);
    const res = await signedPost(sim, { key: keys.privateKey, token, ca });
    assert.equal(res.status, 200, res.text);
    assert.match(String(res.json().transaction_link), /^https:\/\//);
  });

  it('is refused by a client that does not trust the CA', async () => {
    await assert.rejects(login(sim), /self[- ]signed|unable to (get|verify)/i);
  });

  it('reaches the same server as localhost (the certificate names it)', async () => {
    const url = sim.listenUrl.replace('127.0.0.1', 'localhost');
    const res = await send(url, { method: 'GET', path: '/_sim/health', ca: sim.caPem });
    assert.equal(res.status, 200);
  });
});
