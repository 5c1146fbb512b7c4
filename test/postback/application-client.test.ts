// The application client on its own: a delivery is bounded by its timeout and by the receiver's stop signal, and
// leaves nothing behind on that signal, which lives as long as the process.
import assert from 'node:assert/strict';
import { getEventListeners } from 'node:events';
import { after, before, describe, test } from 'node:test';
import { createApplicationClient } from '../../src/postback/application-client.js';
import type { VerifiedPostback } from '../../src/postback/verify-postback.js';
import { ApplicationStub } from './support.js';

const postback: VerifiedPostback = {
  verified: 'signature',
  payload: Buffer.from('{"transaction_id":"tx-1","status":"SUCCESS"}'),
  digest: '0'.repeat(64),
  timestamp: '1795000000',
  nonce: 'nonce-nonce-nonce-1',
};

/**
 * Entries the stop signal keeps for other signals (Node's AbortSignal.any records them there, and on Node 20
 * never removes them: nodejs/node#55351). Undefined when this Node has no such record.
 */
function dependants(signal: AbortSignal): number | undefined {
  const symbol = Object.getOwnPropertySymbols(signal).find((s) => s.description === 'kDependantSignals');
  const set =
    symbol === undefined ? undefined : (signal as unknown as Record<symbol, { size: number } | undefined>)[symbol];
  return set?.size;
}

let application: ApplicationStub;
before(async () => {
  application = await new ApplicationStub().start();
});
after(() => application.stop());

describe('the application client', () => {
  test('many deliveries leave no listener and no record on the long-lived stop signal', async () => {
    const client = createApplicationClient(application.url, 5_000);
    const stopping = new AbortController();
    try {
      for (let i = 0; i < 50; i++) {
        const result = await client.deliver(postback, `req-${i}`, stopping.signal);
        assert.equal(result.status, 200);
      }
      assert.equal(getEventListeners(stopping.signal, 'abort').length, 0, 'no abort listener left');
      assert.ok((dependants(stopping.signal) ?? 0) === 0, `records left: ${dependants(stopping.signal)}`);
    } finally {
      await client.close();
    }
  });

  test('a delivery past its timeout fails as "timeout"; one cut by the stop signal as "aborted"', async () => {
    const client = createApplicationClient(application.url, 200);
    application.delayMs = 2_000;
    try {
      const timedOut = await client.deliver(postback, 'req-timeout', new AbortController().signal);
      assert.deepEqual([timedOut.status, timedOut.failure], [undefined, 'timeout']);
      assert.ok(timedOut.seconds < 1.5, `${timedOut.seconds} s`);
      const stopping = new AbortController();
      const delivery = client.deliver(postback, 'req-stop', stopping.signal);
      setTimeout(() => stopping.abort(), 50);
      const stopped = await delivery;
      assert.deepEqual([stopped.status, stopped.failure], [undefined, 'aborted']);
      const already = await client.deliver(postback, 'req-after-stop', stopping.signal);
      assert.equal(already.failure, 'aborted', 'a delivery after the stop does not start');
    } finally {
      application.delayMs = 0;
      await client.close();
    }
  });
});
