// Idempotency keys end to end: the real sidecar in front of the recording gateway, which counts every
// request that reaches it, and once in front of the strict simulator. docs/idempotency.md is the contract;
// idempotency-failures.test.ts covers what happens when something fails, idempotency-fleet.test.ts several replicas.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { request } from 'node:http';
import {
  assertSameAnswer,
  DEPOSIT_PATH,
  freshDeposit,
  newKey,
  send,
  seriesValue,
  sha256,
} from '../support/idempotent-calls.js';
import { withReadySidecar } from '../support/sidecar.js';
import { startSimWorld } from '../support/sim-world.js';
import { waitFor } from '../support/wait-for.js';

describe('Idempotency-Key: one payment per key', () => {
  it('a retry after the answer gets it again, byte for byte, with Idempotent-Replayed; nothing is sent', () =>
    withReadySidecar({}, async ({ gateway, running }) => {
      const { egressUrl } = running.sidecar;
      gateway.script.push({
        status: 201,
        body: { transaction_link: 'https://pay/t/9', status: 'PENDING' },
        headers: { 'x-gateway-trace': 't-9' },
      });
      const key = newKey();
      const payment = freshDeposit();
      const first = await send(egressUrl, key, payment);
      // A retry from another client library: other headers, none of which is part of the request's fingerprint.
      const retry = await send(egressUrl, key, payment, DEPOSIT_PATH, { 'user-agent': 'retrier/2', accept: '*/*' });
      assert.equal(first.status, 201);
      assert.equal(first.replayed, false);
      assertSameAnswer(retry, first);
      assert.equal(retry.headers.get('x-gateway-trace'), 't-9', "the gateway's headers are kept");
      assert.notEqual(retry.headers.get('x-request-id'), first.headers.get('x-request-id'), 'each request its own id');
      assert.equal(gateway.requests.length, 1);
      assert.equal(gateway.requests[0]!.headers['idempotency-key'], undefined, 'the key is not forwarded');
    }));

  it('gateway errors (4xx, 5xx) are kept and replayed like any answer', () =>
    withReadySidecar({}, async ({ gateway, running }) => {
      const { egressUrl } = running.sidecar;
      for (const status of [400, 500]) {
        gateway.script.push({ status, body: { code: 'FAILED', message: `gateway said ${status}` } });
        const key = newKey();
        const payment = freshDeposit();
        const first = await send(egressUrl, key, payment);
        assert.equal(first.status, status);
        assertSameAnswer(await send(egressUrl, key, payment), first);
      }
      assert.equal(gateway.requests.length, 2);
    }));

  it('two callers racing one key: one is sent, the other gets 409 in_progress with Retry-After: 1, then the replay', () =>
    withReadySidecar({}, async ({ gateway, running }) => {
      const { egressUrl } = running.sidecar;
      gateway.holdUntil = Number.POSITIVE_INFINITY;
      const key = newKey();
      const payment = freshDeposit();
      const first = send(egressUrl, key, payment);
      await waitFor('the condition', () => gateway.requests.length === 1);
      const second = await send(egressUrl, key, payment);
      assert.equal(second.status, 409);
      assert.equal(second.code, 'sidecar.idempotency.in_progress');
      assert.equal(second.retryable, true);
      assert.equal(second.headers.get('retry-after'), '1');
      gateway.holdUntil = 0;
      gateway.release();
      const answered = await first;
      assert.equal(answered.status, 201);
      assertSameAnswer(await send(egressUrl, key, payment), answered);
      assert.equal(gateway.requests.length, 1);
    }));

  it('fifty concurrent retries of one key reach the gateway exactly once; the others get 409 or the replay', () =>
    withReadySidecar({}, async ({ gateway, running }) => {
      const { egressUrl } = running.sidecar;
      const key = newKey();
      const payment = freshDeposit();
      const replies = await Promise.all(Array.from({ length: 50 }, () => send(egressUrl, key, payment)));
      assert.equal(gateway.requests.length, 1);
      const answers = replies.filter((r) => r.status === 201);
      assert.equal(answers.length + replies.filter((r) => r.code === 'sidecar.idempotency.in_progress').length, 50);
      assert.equal(answers.filter((r) => !r.replayed).length, 1, 'one original answer');
      for (const answer of answers) assert.ok(answer.body.equals(answers[0]!.body));
    }));

  it('a key reused for another body, route or query: 422 key_reused, not retryable, nothing sent', () =>
    withReadySidecar({}, async ({ gateway, running }) => {
      const { egressUrl } = running.sidecar;
      const key = newKey();
      assert.equal((await send(egressUrl, key, freshDeposit())).status, 201);
      for (const [body, path] of [
        [freshDeposit(), undefined],
        [gateway.requests[0]!.body, '/api/v2/transfer-out/init'],
        [freshDeposit(), '/api/v2/transaction/init?again=1'],
      ] as const) {
        const reused = await send(egressUrl, key, body, path);
        assert.equal(reused.status, 422, path);
        assert.equal(reused.code, 'sidecar.idempotency.key_reused');
        assert.equal(reused.retryable, false);
      }
      assert.equal(gateway.requests.length, 1);
    }));

  it('a malformed key: 400 key_invalid, nothing sent', () =>
    withReadySidecar({}, async ({ gateway, running }) => {
      for (const key of ['', 'has space', 'k'.repeat(256), 'caf\u00e9']) {
        const reply = await send(running.sidecar.egressUrl, key, freshDeposit());
        assert.equal(reply.status, 400, JSON.stringify(key));
        assert.equal(reply.code, 'sidecar.idempotency.key_invalid');
      }
      // Two Idempotency-Key lines (fetch would fold them into one): which one would the caller's retry send?
      assert.equal(await postWithRepeatedKey(running.sidecar.egressUrl, 'same-key', freshDeposit()), 400);
      assert.equal(gateway.requests.length, 0);
    }));

  it('SIDECAR_IDEMPOTENCY_REQUIRED=true: 428 key_required without a key; with one it is sent', () =>
    withReadySidecar({ SIDECAR_IDEMPOTENCY_REQUIRED: 'true' }, async ({ gateway, running }) => {
      const missing = await send(running.sidecar.egressUrl, undefined, freshDeposit());
      assert.equal(missing.status, 428);
      assert.equal(missing.code, 'sidecar.idempotency.key_required');
      assert.equal(gateway.requests.length, 0);
      assert.equal((await send(running.sidecar.egressUrl, newKey(), freshDeposit())).status, 201);
    }));

  it('the key appears nowhere (logs, metrics); the request line names its digest and whether it was replayed', () =>
    withReadySidecar({}, async ({ running }) => {
      const { egressUrl, adminUrl } = running.sidecar;
      const key = newKey();
      const payment = freshDeposit();
      await send(egressUrl, key, payment);
      await send(egressUrl, key, payment);
      await send(egressUrl, key, freshDeposit());
      const metrics = await (await fetch(`${adminUrl}/metrics`)).text();
      assert.equal(running.logs.text.includes(key), false, 'key in logs');
      assert.equal(metrics.includes(key), false, 'key in metrics');
      const lines = running.logs.lines().filter((l) => l.event === 'request');
      assert.deepEqual(
        lines.map((l) => [l.idempotencyKeySha256, l.replayed, l.status]),
        [
          [sha256(key), undefined, 201],
          [sha256(key), true, 201],
          [sha256(key), undefined, 422],
        ],
      );
      for (const [outcome, count] of [
        ['new', 1],
        ['replayed', 1],
        ['key_reused', 1],
        ['in_progress', 0],
        ['abandoned', 0],
      ] as const)
        assert.equal(seriesValue(metrics, `signing_sidecar_idempotency_total{outcome="${outcome}"}`), count, outcome);
    }));
});

/** POSTs a deposit with the Idempotency-Key header line sent twice; resolves with the status. */
function postWithRepeatedKey(egressUrl: string, key: string, body: string): Promise<number> {
  return new Promise((resolve, reject) => {
    const headers = { 'content-type': 'application/json', 'idempotency-key': [key, key] };
    const req = request(`${egressUrl}${DEPOSIT_PATH}`, { method: 'POST', headers }, (res) => {
      res.resume();
      res.on('end', () => resolve(res.statusCode ?? 0));
    });
    req.on('error', reject);
    req.end(body);
  });
}

describe('Idempotency-Key with the real simulator', () => {
  it('a deposit retried with its key is one transaction at the gateway', async () => {
    const world = await startSimWorld();
    try {
      const { egressUrl } = world.running.sidecar;
      const key = newKey();
      const payment = freshDeposit();
      const first = await send(egressUrl, key, payment);
      assert.ok(first.status < 300, first.body.toString());
      assertSameAnswer(await send(egressUrl, key, payment), first);
      assert.equal(world.simulator.transactions().length, 1);
    } finally {
      await world.stop();
    }
  });
});
