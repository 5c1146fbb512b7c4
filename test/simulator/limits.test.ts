// Bounded memory and what the logs may say: capped transaction and postback logs, no payload data or webhook
// secrets in log lines, a postback failure outside HTTP logged instead of crashing the process.
import assert from 'node:assert/strict';
import { generateKeyPairSync } from 'node:crypto';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Writable } from 'node:stream';
import { describe, it } from 'node:test';
import { createClock } from '../../packages/simulator/src/clock.js';
import { createSimLogger } from '@signing-sidecar/simulator';
import { duplicateTopLevelKey, topLevelKeys } from '../../packages/simulator/src/json-keys.js';
import { createPostbackSender, displayUrl } from '../../packages/simulator/src/postbacks.js';
import { createTransactionStore } from '../../packages/simulator/src/transactions.js';
import { login, makeKeys, send, signedPost, startWithAccount } from './support.js';
import type { PaymentFields } from '../../packages/simulator/src/payloads.js';
import type { Transaction } from '../../packages/simulator/src/transactions.js';
import { waitFor } from '../support/wait-for.js';

const FIELDS: PaymentFields = {
  amount: '1.00',
  currency: 'USD',
  userId: 'u',
  invoiceNo: 'inv-secret-42',
  gateway: undefined,
  extra: {},
};

function captureLogs(): { logger: ReturnType<typeof createSimLogger>; text(): string } {
  let text = '';
  const sink = new Writable({
    write(chunk: Buffer, _enc, done) {
      text += chunk.toString();
      done();
    },
  });
  return { logger: createSimLogger(sink, 'debug'), text: () => text };
}

describe('limits and log hygiene', () => {
  it('keeps only the newest transactions', () => {
    const store = createTransactionStore({
      clock: createClock(),
      autoCompleteMs: null,
      autoCompleteStatus: 'SUCCESS',
      onFinal: () => undefined,
      maxTransactions: 3,
    });
    const ids = Array.from({ length: 5 }, () => store.create('deposit', 'v', FIELDS).id);
    store.complete(ids[2] ?? '', 'SUCCESS');
    assert.deepEqual(
      store.list().map((t) => t.id),
      ids.slice(2),
    );
    assert.equal(store.get(ids[0] ?? ''), undefined);
    store.create('deposit', 'v', FIELDS);
    assert.equal(store.get(ids[2] ?? ''), undefined, 'completion does not make a transaction younger');
  });

  it('caps the postback attempt log, and logs (not throws) a failure outside the HTTP call', async () => {
    const logs = captureLogs();
    const { privateKey } = generateKeyPairSync('rsa', { modulusLength: 2048 });
    const sender = createPostbackSender({
      clock: createClock(),
      privateKey,
      logger: logs.logger,
      retry: { initialDelayMs: 1, maxDelayMs: 1, maxAttempts: 5, timeoutMs: 500 },
      maxLogEntries: 2,
    });
    const tx: Transaction = {
      id: 'txn_01',
      type: 'deposit',
      username: 'v',
      status: 'SUCCESS',
      fields: FIELDS,
      createdAt: '2025-01-01T00:00:00Z',
      completedAt: '2025-01-01T00:00:01Z',
      pageToken: 'not-used-by-postbacks',
    };
    // Port 9 (discard) on loopback refuses the connection: five failed attempts, of which two are kept.
    sender.send({ url: 'http://127.0.0.1:9/hook', signed: false }, tx);
    // An unparsable URL makes signing throw before any HTTP call: the delivery ends with a log line.
    sender.send({ url: 'not a url', signed: true }, tx);
    await waitFor(
      'the condition',
      () => logs.text().includes('postback.abandoned') && logs.text().includes('postback.error'),
    );
    assert.deepEqual(
      sender.attempts().map((a) => a.attempt),
      [4, 5],
    );
    await sender.close();
  });

  it('shows webhook URLs as origin and path only', () => {
    assert.equal(displayUrl('https://user:pw@hooks.example:8443/a/b?token=s3cr3t#x'), 'https://hooks.example:8443/a/b');
    assert.equal(displayUrl('nope'), '[unparsable URL]');
  });

  it('finds duplicate top-level keys in raw JSON, escaped or nested', () => {
    assert.deepEqual(topLevelKeys(' {"a":{"a":1,"b":[{"c":"}"}]},"b\\"":"x,\\"y","c":[1,{"d":2}]}'), ['a', 'b"', 'c']);
    assert.equal(duplicateTopLevelKey(Buffer.from('{"data":"x","\\u0064ata":"y"}')), 'data');
    assert.equal(duplicateTopLevelKey(Buffer.from('{"data":"x","inner":{"data":"y"}}')), undefined);
  });

  it('keeps payload data and webhook secrets out of logs and the control API', async () => {
    const received: string[] = [];
    const hook = createServer((req, res) => {
      received.push(req.url ?? '');
      req.resume();
      res.writeHead(204).end();
    });
    await new Promise<void>((resolve) => hook.listen(0, '127.0.0.1', resolve));
    const webhookUrl = `http://127.0.0.1:${(hook.address() as AddressInfo).port}/hook?secret=s3cr3t`;
    const logs = captureLogs();
    const keys = await makeKeys();
    const sim = await startWithAccount(keys, { logger: logs.logger }, { webhookUrl });
    try {
      const token = (await login(sim)).access_token ?? '';
      const payload = { amount: '1.00', currency: 'USD', user_id: 'u', invoice_no: 'inv-secret-42' };
      const res = await signedPost(sim, { key: keys.privateKey, token, payload });
      assert.equal(res.status, 200, res.text);
      await sim.complete(String(res.json().transaction_id), 'SUCCESS');
      await waitFor('the condition', () => sim.postbacks().some((a) => a.delivered));
      assert.deepEqual(received, ['/hook?secret=s3cr3t'], 'the real URL is still used for delivery');
      assert.equal(sim.postbacks()[0]?.url, webhookUrl.replace(/\?.*/, ''));
      const listed = await send(sim.listenUrl, { method: 'GET', path: '/_sim/postbacks' });
      assert.doesNotMatch(listed.text, /s3cr3t/);
      assert.match(logs.text(), /request\.accepted/);
      assert.match(logs.text(), /postback\.attempt/);
      assert.doesNotMatch(logs.text(), /inv-secret-42|s3cr3t/);
    } finally {
      await sim.close();
      await new Promise((resolve) => hook.close(resolve));
    }
  });
});
