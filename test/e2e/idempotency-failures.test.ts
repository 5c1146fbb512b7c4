// Idempotency keys when something fails: a retryable sidecar error, an outcome_unknown, a dead request's
// record past its deadline, the store unreachable, shutdown. The recording gateway counts what reaches it.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { SidecarDeps } from '../../src/app.js';
import { decodeRecord } from '../../src/idempotency/record.js';
import { SwitchableStore } from '../support/failing-store.js';
import {
  assertKeyedRefusedUnkeyedSent,
  assertSameAnswer,
  freshDeposit,
  newKey,
  send,
  sendHeld,
  seriesValue,
  sha256,
  withSidecar,
} from '../support/idempotent-calls.js';
import { withReadySidecar } from '../support/sidecar.js';
import { waitFor } from '../support/wait-for.js';

describe('Idempotency-Key when something fails', () => {
  it('a retryable sidecar error (nothing sent) is not kept: the retry with the same key goes through', () =>
    // One gateway connection, held by a request the gateway never answers: the keyed request cannot get a
    // connection within the connect timeout and retry deadline, so it is answered unreachable, never sent.
    withReadySidecar(
      {
        SIDECAR_UPSTREAM_CONNECTIONS: '1',
        SIDECAR_UPSTREAM_CONNECT_TIMEOUT_MS: '100',
        SIDECAR_UPSTREAM_CONNECT_RETRY_DEADLINE_MS: '300',
        SIDECAR_UPSTREAM_RESPONSE_TIMEOUT_MS: '1500',
      },
      async ({ gateway, running }) => {
        const { egressUrl } = running.sidecar;
        gateway.script.push({ hang: true });
        const blocker = send(egressUrl, undefined, freshDeposit());
        await waitFor('the condition', () => gateway.requests.length === 1);
        const key = newKey();
        const payment = freshDeposit();
        const refused = await send(egressUrl, key, payment);
        assert.equal(refused.code, 'sidecar.upstream.unreachable');
        assert.equal(refused.retryable, true);
        assert.equal((await blocker).code, 'sidecar.upstream.outcome_unknown');
        const retry = await send(egressUrl, key, payment);
        assert.equal(retry.status, 201);
        assert.equal(retry.replayed, false);
        assert.equal(gateway.requests.length, 2);
      },
    ));

  it('outcome_unknown is kept and replayed as outcome_unknown: a retry never becomes a second send', () =>
    withReadySidecar({}, async ({ gateway, running }) => {
      const { egressUrl } = running.sidecar;
      gateway.script.push({ reset: true });
      const key = newKey();
      const payment = freshDeposit();
      const first = await send(egressUrl, key, payment);
      assert.equal(first.code, 'sidecar.upstream.outcome_unknown');
      const retry = await send(egressUrl, key, payment);
      assertSameAnswer(retry, first);
      assert.equal(retry.retryable, false);
      assert.equal(gateway.requests.length, 1);
    }));

  it('an in_progress record past its deadline (its replica gone) is answered outcome_unknown, never resent', async () => {
    let offsetMs = 0;
    await withSidecar({}, { now: () => Date.now() + offsetMs }, async (gateway, running) => {
      const { egressUrl } = running.sidecar;
      const { key, payment, first } = await sendHeld(gateway, egressUrl);
      offsetMs = 116_000; // past 115 s, the longest request time with the default settings
      const late = await send(egressUrl, key, payment);
      assert.equal(late.status, 502);
      assert.equal(late.code, 'sidecar.upstream.outcome_unknown');
      assert.equal(late.replayed, true);
      gateway.holdUntil = 0;
      gateway.release();
      // The first caller still gets the truth; every retry keeps getting what the first retry was told.
      assert.equal((await first).status, 201);
      assertSameAnswer(await send(egressUrl, key, payment), late);
      assert.equal(gateway.requests.length, 1);
      const abandoned = running.logs.lines().find((l) => l.event === 'idempotency.abandoned');
      assert.equal(abandoned?.abandonedRequestId, (await first).headers.get('x-request-id'));
    });
  });

  it('a full memory store keeps a record in flight: its retry is 409; claims alone filling it refuse the next, unsent', () =>
    // Two entries at most, both claims of held payments: nothing settled to evict. A retry that did reach the gateway
    // would wait for the held answer until the (short) response timeout.
    withReadySidecar(
      { SIDECAR_STATE_MEMORY_MAX_ENTRIES: '2', SIDECAR_UPSTREAM_RESPONSE_TIMEOUT_MS: '5000' },
      async ({ gateway, running }) => {
        const { egressUrl } = running.sidecar;
        const { key, payment, first } = await sendHeld(gateway, egressUrl);
        const other = send(egressUrl, newKey(), freshDeposit());
        await waitFor('both at the gateway', () => gateway.requests.length === 2);
        const thirdKey = newKey();
        const third = freshDeposit();
        const refused = await send(egressUrl, thirdKey, third);
        assert.equal(refused.status, 503);
        assert.equal(refused.code, 'sidecar.idempotency.unavailable');
        assert.equal(refused.retryable, true);
        assert.match((await running.sidecar.store.get(`idempotency:${sha256(key)}`)) ?? '', /"in_progress"/);
        assert.equal((await send(egressUrl, key, payment)).code, 'sidecar.idempotency.in_progress');
        assert.equal(gateway.requests.length, 2, 'neither the refused payment nor the retry was sent');
        gateway.holdUntil = 0;
        gateway.release();
        assert.equal((await first).status, 201, 'the first caller gets the gateway answer');
        assert.equal((await other).status, 201);
        const later = await send(egressUrl, thirdKey, third);
        assert.equal(later.status, 201, 'the refused payment goes once there is room');
        assert.equal(later.replayed, false);
        const copies = gateway.requests.filter((r) => r.body === gateway.requests[0]!.body);
        assert.equal(copies.length, 1, 'one copy of the payment');
        assert.equal(gateway.requests.length, 3);
      },
    ));

  it('the store unreachable: 503 unavailable (retryable), nothing sent; requests without a key still go', async () => {
    let store: SwitchableStore | undefined;
    const wrapStore: SidecarDeps['wrapStore'] = (inner) => (store = new SwitchableStore(inner));
    await withSidecar({}, { wrapStore }, async (gateway, running) => {
      store!.down = true;
      await assertKeyedRefusedUnkeyedSent(running.sidecar.egressUrl, gateway);
      const metrics = await (await fetch(`${running.sidecar.adminUrl}/metrics`)).text();
      assert.equal(seriesValue(metrics, 'signing_sidecar_idempotency_total{outcome="unavailable"}'), 1);
    });
  });

  it('a request cut off by shutdown after it was sent keeps its key as outcome_unknown, never released', () =>
    withReadySidecar({ SIDECAR_SHUTDOWN_MAX_DELAY_MS: '200' }, async ({ gateway, running }) => {
      const { key, first: pending } = await sendHeld(gateway, running.sidecar.egressUrl);
      await running.stop();
      const cut = await pending;
      assert.equal(cut.status, 504);
      assert.equal(cut.code, 'sidecar.upstream.outcome_unknown');
      // The handler records what its caller got once the gateway client has given up on the held request.
      const read = async () => {
        const text = await running.sidecar.store.get(`idempotency:${sha256(key)}`);
        assert.ok(text !== undefined, 'never released');
        return decodeRecord(text);
      };
      let kept = await read();
      const deadline = Date.now() + 5_000;
      while (kept.state === 'in_progress' && Date.now() < deadline) {
        await new Promise((resolve) => setTimeout(resolve, 20));
        kept = await read();
      }
      assert.equal(kept.state, 'done');
      assert.ok(kept.state === 'done' && kept.answer.body.equals(cut.body), 'kept as the caller got it');
    }));
});
