import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { makeKeys } from '../support/keys.js';
import { depositJson } from '../support/payloads.js';
import { RecordingGateway } from '../support/recording-gateway.js';
import { sidecarEnv, startTestSidecar, waitUntilReady, type TestSidecar } from '../support/sidecar.js';

// A gateway answer whose status HTTP does not allow (RFC 9110 15: 100 to 599), through the real egress listener
// over real sockets: the caller gets the sidecar's stable code, never the status as is, and is told that the
// payment may exist (the request did reach the gateway).

describe('a gateway status outside 100-599, end to end', () => {
  let gateway: RecordingGateway;
  let running: TestSidecar;

  before(async () => {
    gateway = await new RecordingGateway().start();
    running = await startTestSidecar(await sidecarEnv(await makeKeys(), gateway.url));
    await waitUntilReady(running.sidecar);
  });
  after(async () => {
    await running.stop();
    await gateway.stop();
  });

  async function pay(invoice: string): Promise<{ status: number; body: Record<string, unknown> }> {
    const answer = await fetch(`${running.sidecar.egressUrl}/api/v2/transaction/init`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: depositJson({ invoice_no: invoice }),
    });
    return { status: answer.status, body: (await answer.json()) as Record<string, unknown> };
  }

  for (const status of [600, 999]) {
    it(`${status}: 502 sidecar.upstream.outcome_unknown, not retryable, sent exactly once`, async () => {
      const sentBefore = gateway.requests.length;
      gateway.script.push({ status, body: { invoice_no: `inv-${status}`, status: 'PENDING' } });
      const answer = await pay(`inv-${status}`);
      assert.equal(answer.status, 502);
      assert.equal(answer.body.code, 'sidecar.upstream.outcome_unknown');
      assert.equal(answer.body.retryable, false);
      assert.equal(gateway.requests.length - sentBefore, 1, 'never resent');
      const line = running.logs
        .lines()
        .findLast((l) => l.event === 'request' && l.code === 'sidecar.upstream.outcome_unknown');
      assert.equal(line?.causeCode, 'ERR_GATEWAY_MALFORMED_ANSWER', 'the log line says why');
      assert.equal((await pay('inv-next')).status, 201, 'the next payment goes through');
    });
  }

  it('599, the highest status HTTP allows, passes through unchanged', async () => {
    gateway.script.push({ status: 599, body: { code: 'odd', message: 'still HTTP' } });
    const answer = await pay('inv-599');
    assert.deepEqual([answer.status, answer.body.code], [599, 'odd']);
  });
});
