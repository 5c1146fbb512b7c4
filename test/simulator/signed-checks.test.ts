// Every check of a signed endpoint, its error code and the order in which the checks run.
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { DEPOSIT, b64, codeOf, login, makeKeys, send, signedPost, startWithAccount } from './support.js';
import type { TestKeys } from './support.js';
import type { RunningSimulator } from '@signing-sidecar/simulator';

describe('signed endpoints', () => {
  let keys: TestKeys;
  let otherKeys: TestKeys;
  let sim: RunningSimulator;
  let token: string;

  before(async () => {
    [keys, otherKeys] = await Promise.all([makeKeys(), makeKeys()]);
    sim = await startWithAccount(keys, {}, { allowIps: ['127.0.0.1'] });
    token = (await login(sim)).access_token ?? '';
  });
  after(() => sim.close());

  it('accepts a correctly signed deposit: 200, PENDING, transaction_link that opens', async () => {
    const res = await signedPost(sim, { key: keys.privateKey, token });
    assert.equal(res.status, 200, res.text);
    const body = res.json();
    assert.equal(body.status, 'PENDING');
    assert.match(String(body.transaction_id), /^txn_/);
    assert.equal(body.invoice_no, 'inv-1');
    const link = new URL(String(body.transaction_link));
    assert.equal(link.origin, sim.baseUrl);
    const page = await send(sim.listenUrl, { method: 'GET', path: link.pathname });
    assert.equal(page.status, 200);
    assert.match(page.text, /PENDING/);
  });

  it('accepts a withdrawal with optional account fields and a non-empty query kept in the signed URL', async () => {
    const payload = { amount: '5.00', currency: 'EUR', user_id: 'u2', invoice_no: 'out-7', account_number: '123' };
    const res = await signedPost(sim, {
      key: keys.privateKey,
      token,
      path: '/api/v2/transfer-out/init?b=2&a=1',
      payload,
    });
    assert.equal(res.status, 200, res.text);
    assert.equal(res.json().status, 'PENDING');
    assert.equal(res.json().transaction_link, undefined);
    assert.equal(sim.transactions().find((t) => t.transaction_id === res.json().transaction_id)?.type, 'withdrawal');
  });

  it('signs an empty query without its "?"', async () => {
    const res = await signedPost(sim, { key: keys.privateKey, token, path: '/api/v2/transaction/init?' });
    assert.equal(res.status, 200, res.text);
  });

  it('refuses a non-allowlisted source address with 403 ip.forbidden, before looking at the token', async () => {
    const res = await signedPost(sim, { key: keys.privateKey, token: 'garbage', localAddress: '127.0.0.2' });
    assert.equal(res.status, 403);
    assert.equal(codeOf(res), 'ip.forbidden');
    assert.match(String(res.json().message), /127\.0\.0\.2/);
  });

  it('refuses a missing, unknown or malformed bearer token with 401 FAILED and a message', async () => {
    for (const authorization of [undefined, 'Bearer nope', 'Basic abc', `bearer${token}`]) {
      const res = await signedPost(sim, { key: keys.privateKey, token, headers: { authorization } });
      assert.equal(res.status, 401, String(authorization));
      assert.equal(codeOf(res), 'FAILED');
      assert.ok(String(res.json().message).length > 0);
    }
  });

  it('names each missing signature header', async () => {
    for (const header of ['x-timestamp', 'x-nonce', 'x-signature']) {
      const res = await signedPost(sim, { key: keys.privateKey, token, headers: { [header]: undefined } });
      assert.equal(res.status, 401);
      assert.equal(codeOf(res), 'signature.header.missing');
      assert.match(String(res.json().message).toLowerCase(), new RegExp(header));
    }
  });

  it('refuses timestamps that are not decimal seconds', async () => {
    for (const ts of ['2025-11-21T05:00:00Z', '1.7e9', '-5', '1763700000.5', '0x10']) {
      const res = await signedPost(sim, { key: keys.privateKey, token, timestamp: ts });
      assert.equal(codeOf(res), 'signature.header.invalid', ts);
    }
  });

  it('applies the 60 s behind / 5 s ahead window', async () => {
    const now = sim.clock.nowSeconds();
    const cases: [number, number, string | undefined][] = [
      [-65, 401, 'signature.timestamp.expired'],
      [-55, 200, undefined],
      [4, 200, undefined],
      [10, 401, 'signature.timestamp.future'],
    ];
    for (const [delta, status, code] of cases) {
      const res = await signedPost(sim, { key: keys.privateKey, token, timestamp: String(now + delta) });
      assert.equal(res.status, status, `${delta}: ${res.text}`);
      if (code !== undefined) assert.equal(codeOf(res), code);
    }
  });

  it('treats a millisecond timestamp as future and says so', async () => {
    const res = await signedPost(sim, { key: keys.privateKey, token, timestamp: String(Date.now()) });
    assert.equal(codeOf(res), 'signature.timestamp.future');
    assert.match(String(res.json().message), /milliseconds/);
  });

  it('refuses nonces outside 16-64 of [A-Za-z0-9_-]', async () => {
    for (const nonce of ['short', 'a'.repeat(65), 'has space in it 12345', 'plus+slash/equals=1234']) {
      const res = await signedPost(sim, { key: keys.privateKey, token, nonce });
      assert.equal(codeOf(res), 'signature.nonce.invalid', nonce);
    }
    const ok = await signedPost(sim, { key: keys.privateKey, token, nonce: 'A'.repeat(64) });
    assert.equal(ok.status, 200);
  });

  it('refuses a signature from another key, altered data or a non-standard base64 signature', async () => {
    const wrongKey = await signedPost(sim, { key: otherKeys.privateKey, token });
    assert.equal(codeOf(wrongKey), 'signature.verify.failed');
    assert.equal(wrongKey.status, 401);
    const altered = await signedPost(sim, {
      key: keys.privateKey,
      token,
      body: JSON.stringify({ data: b64({ ...DEPOSIT, amount: '999.00' }) }),
    });
    assert.equal(codeOf(altered), 'signature.verify.failed');
    const good = await signedPost(sim, { key: keys.privateKey, token });
    assert.equal(good.status, 200);
  });

  it('refuses a replayed nonce with 401 signature.nonce.replayed, but a bad signature does not burn the nonce', async () => {
    const nonce = 'replay-test-nonce-0001';
    const forged = await signedPost(sim, { key: otherKeys.privateKey, token, nonce });
    assert.equal(codeOf(forged), 'signature.verify.failed');
    const first = await signedPost(sim, { key: keys.privateKey, token, nonce });
    assert.equal(first.status, 200, first.text);
    const again = await signedPost(sim, { key: keys.privateKey, token, nonce });
    assert.equal(again.status, 401);
    assert.equal(codeOf(again), 'signature.nonce.replayed');
    assert.equal(sim.transactions().filter((t) => t.transaction_id === first.json().transaction_id).length, 1);
  });

  it('checks the envelope after the signature: extra fields, base64url, missing padding, non-object JSON', async () => {
    const padded = findEncoding((d) => d.endsWith('='));
    const withUrlChars = findEncoding((d) => /[+/]/.test(d));
    const cases: [string, string | undefined, string][] = [
      [b64(DEPOSIT), JSON.stringify({ data: b64(DEPOSIT), extra: 1 }), 'envelope.invalid'],
      [withUrlChars.replaceAll('+', '-').replaceAll('/', '_'), undefined, 'envelope.data.invalid_base64'],
      [padded.replace(/=+$/, ''), undefined, 'envelope.data.invalid_base64'],
      [`${padded.slice(0, 8)}\n${padded.slice(8)}`, undefined, 'envelope.data.invalid_base64'],
      [Buffer.from('{"amount":').toString('base64'), undefined, 'envelope.data.invalid_json'],
      [Buffer.from('[1,2]').toString('base64'), undefined, 'envelope.data.invalid_json'],
    ];
    for (const [data, body, code] of cases) {
      const res = await signedPost(sim, { key: keys.privateKey, token, data, ...(body === undefined ? {} : { body }) });
      assert.equal(res.status, 400, `${code}: ${res.text}`);
      assert.equal(codeOf(res), code);
    }
  });

  it('requires the deposit fields as JSON strings, amount a positive decimal string', async () => {
    const cases: [Record<string, unknown>, string][] = [
      [{ ...DEPOSIT, amount: 100.5 }, 'payload.field.invalid'],
      [{ ...DEPOSIT, amount: '1e3' }, 'payload.field.invalid'],
      [{ ...DEPOSIT, amount: '0.00' }, 'payload.field.invalid'],
      [{ ...DEPOSIT, user_id: 42 }, 'payload.field.invalid'],
      [{ ...DEPOSIT, gateway: null }, 'payload.field.invalid'],
      [{ ...DEPOSIT, currency: 'usd' }, 'payload.field.invalid'],
      [{ amount: '1.00', currency: 'USD', user_id: 'u1' }, 'payload.field.missing'],
    ];
    for (const [payload, code] of cases) {
      const res = await signedPost(sim, { key: keys.privateKey, token, payload });
      assert.equal(res.status, 400, JSON.stringify(payload));
      assert.equal(codeOf(res), code);
    }
  });

  it('runs the checks in order: a request wrong in every way reports the earliest failure', async () => {
    const now = sim.clock.nowSeconds();
    const everythingWrong = { key: otherKeys.privateKey, nonce: 'bad', timestamp: String(now - 3600), data: 'x' };
    const steps: [Record<string, unknown>, string][] = [
      [{ token: 'nope', localAddress: '127.0.0.2' }, 'ip.forbidden'],
      [{ token: 'nope' }, 'FAILED'],
      [{ token, headers: { 'x-signature': 'not base64!' } }, 'signature.header.invalid'],
      [{ token }, 'signature.timestamp.expired'],
      [{ token, timestamp: String(now) }, 'signature.nonce.invalid'],
      [{ token, timestamp: String(now), nonce: 'long-enough-nonce-000' }, 'signature.verify.failed'],
    ];
    for (const [override, code] of steps) {
      const res = await signedPost(sim, { ...everythingWrong, token, ...override });
      assert.equal(codeOf(res), code);
    }
  });
});

/** A deposit payload whose base64 has the wanted property (padding, "+" or "/"), found by varying user_id. */
function findEncoding(wanted: (data: string) => boolean): string {
  for (let i = 0; i < 1000; i++) {
    const data = b64({ ...DEPOSIT, user_id: `user-${'~'.repeat(i % 7)}${i}` });
    if (wanted(data)) return data;
  }
  throw new Error('no payload with the wanted encoding');
}
