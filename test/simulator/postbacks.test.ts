// Postbacks arriving at a real webhook server: signed and unsigned, retried with backoff until a 2xx.
import assert from 'node:assert/strict';
import { constants, createPublicKey, verify } from 'node:crypto';
import { createServer } from 'node:http';
import type { IncomingHttpHeaders, Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { before, describe, it } from 'node:test';
import { login, makeKeys, signedPost, startWithAccount } from './support.js';
import type { TestKeys } from './support.js';
import { waitFor } from '../support/wait-for.js';

interface Received {
  readonly headers: IncomingHttpHeaders;
  readonly body: string;
  readonly url: string;
}

/** A webhook that fails the first `failures` deliveries with 500, then answers 204. */
async function startWebhook(failures: number): Promise<{ url: string; received: Received[]; close(): Promise<void> }> {
  const received: Received[] = [];
  let remainingFailures = failures;
  const server: Server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      received.push({ headers: req.headers, body: Buffer.concat(chunks).toString('utf8'), url: req.url ?? '' });
      res.writeHead(remainingFailures-- > 0 ? 500 : 204).end();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}/hooks/gateway?source=sim`,
    received,
    close: () => new Promise((resolve) => server.close(() => resolve())),
  };
}

describe('postbacks', () => {
  let keys: TestKeys;
  before(async () => {
    keys = await makeKeys();
  });

  it('delivers a signed postback, retrying after 500s, verifiable with the simulator public key', async () => {
    const hook = await startWebhook(2);
    const sim = await startWithAccount(
      keys,
      { postbackRetry: { initialDelayMs: 20, maxDelayMs: 50 } },
      { webhookUrl: hook.url, signedPostbacks: true },
    );
    try {
      const token = (await login(sim)).access_token ?? '';
      const init = await signedPost(sim, { key: keys.privateKey, token });
      const id = String(init.json().transaction_id);
      const completed = await sim.complete(id, 'SUCCESS');
      assert.equal(completed.status, 'SUCCESS');
      // The webhook sees the third request before the simulator has logged its answer.
      await waitFor('the condition', () => hook.received.length === 3 && sim.postbacks().length === 3);
      const last = hook.received[2];
      assert.ok(last);
      const envelope = JSON.parse(last.body) as Record<string, string>;
      assert.deepEqual(Object.keys(envelope), ['data']);
      const payload = JSON.parse(Buffer.from(envelope.data ?? '', 'base64').toString('utf8')) as Record<string, string>;
      assert.equal(payload.transaction_id, id);
      assert.equal(payload.status, 'SUCCESS');
      assert.equal(payload.type, 'deposit');
      assert.equal(payload.invoice_no, 'inv-1');
      assert.equal(payload.amount, '100.50');
      const { 'x-timestamp': ts, 'x-nonce': nonce, 'x-signature': signature } = last.headers;
      assert.match(String(nonce), /^[A-Za-z0-9_-]{16,64}$/);
      const signingString = `POST.${hook.url}.${String(ts)}.${String(nonce)}.${envelope.data}`;
      const ok = verify(
        'sha256',
        Buffer.from(signingString),
        { key: createPublicKey(sim.postbackPublicKeyPem), padding: constants.RSA_PKCS1_PADDING },
        Buffer.from(String(signature), 'base64'),
      );
      assert.equal(ok, true, 'postback signature verifies');
      const nonces = new Set(hook.received.map((r) => r.headers['x-nonce']));
      assert.equal(nonces.size, 3, 'every attempt has a fresh nonce');
      const attempts = sim.postbacks();
      assert.deepEqual(
        attempts.map((a) => a.status),
        [500, 500, 204],
      );
      assert.deepEqual(
        attempts.map((a) => a.delivered),
        [false, false, true],
      );
      await assert.rejects(sim.complete(id, 'FAILED'), /already SUCCESS/);
    } finally {
      await Promise.all([sim.close(), hook.close()]);
    }
  });

  it('sends unsigned postbacks when the account has not opted in, and auto-completes after the delay', async () => {
    const hook = await startWebhook(0);
    const sim = await startWithAccount(
      keys,
      { postbackDelayMs: 30, autoCompleteStatus: 'FAILED' },
      { webhookUrl: hook.url },
    );
    try {
      const token = (await login(sim)).access_token ?? '';
      const payload = { amount: '7.25', currency: 'EUR', user_id: 'u9', invoice_no: 'out-9' };
      const init = await signedPost(sim, { key: keys.privateKey, token, path: '/api/v2/transfer-out/init', payload });
      assert.equal(init.status, 200, init.text);
      await waitFor('the condition', () => hook.received.length === 1);
      const got = hook.received[0];
      assert.equal(got?.headers['x-signature'], undefined);
      assert.equal(got?.headers['x-timestamp'], undefined);
      const data = (JSON.parse(got?.body ?? '{}') as Record<string, string>).data ?? '';
      const body = JSON.parse(Buffer.from(data, 'base64').toString('utf8')) as Record<string, string>;
      assert.equal(body.status, 'FAILED');
      assert.equal(body.type, 'withdrawal');
      assert.equal(sim.transactions()[0]?.status, 'FAILED');
    } finally {
      await Promise.all([sim.close(), hook.close()]);
    }
  });

  it('stops retrying when closed (no hanging timers)', async () => {
    const hook = await startWebhook(1000);
    const sim = await startWithAccount(keys, { postbackRetry: { initialDelayMs: 10_000 } }, { webhookUrl: hook.url });
    try {
      const token = (await login(sim)).access_token ?? '';
      const init = await signedPost(sim, { key: keys.privateKey, token });
      await sim.complete(String(init.json().transaction_id), 'SUCCESS');
      await waitFor('the condition', () => hook.received.length === 1);
    } finally {
      const started = Date.now();
      await sim.close();
      assert.ok(Date.now() - started < 1000, 'close does not wait for the backoff');
      await hook.close();
    }
  });
});
