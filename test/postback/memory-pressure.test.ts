// Past the memory high-water mark (docs/operations.md, "Memory") the receiver answers a genuine postback 503
// postback.receiver.overloaded before reading it, and the gateway's next delivery, once memory is back under the
// low-water mark, is taken and reaches the application: nothing is lost, only delayed. The sidecar runs in this
// process, its limit set a little above what the process holds; the memory this test then holds and gives back
// moves the process past the mark and under it again, as a burst of work would.
import assert from 'node:assert/strict';
import { runInNewContext } from 'node:vm';
import { setFlagsFromString } from 'node:v8';
import { describe, it } from 'node:test';
import { waitFor } from '../support/wait-for.js';
import { deliver, gatewayKeys, signPostback, startSignedReceiver } from './support.js';

const MIB = 1024 * 1024;

/** V8's collector, to give the held memory back at once (node's --expose-gc, for this test process alone). */
function collector(): () => void {
  setFlagsFromString('--expose-gc');
  return runInNewContext('gc') as () => void;
}

async function shedding(adminUrl: string): Promise<number> {
  const text = await (await fetch(`${adminUrl}/metrics`)).text();
  const line = text.split('\n').find((l) => l.startsWith('signing_sidecar_memory_shedding '));
  return Number(line?.split(' ')[1]);
}

describe('postback receiver under memory pressure', () => {
  it('answers 503 overloaded past the high-water mark; the delivery after memory is back is taken', async () => {
    const gc = collector();
    gc();
    const gateway = await gatewayKeys();
    // High water (90 % of the limit) 64 MiB above what the process holds now; low water 80 % of it.
    const limitMb = Math.ceil((process.memoryUsage.rss() + 64 * MIB) / 0.9 / MIB);
    const world = await startSignedReceiver(gateway, { SIDECAR_MEMORY_LIMIT_MB: String(limitMb) });
    const held: Buffer[] = [];
    try {
      const { adminUrl } = world.running.sidecar;
      assert.equal(await shedding(adminUrl), 0);
      held.push(Buffer.alloc(128 * MIB, 1));
      await waitFor('shedding', async () => (await shedding(adminUrl)) === 1, 5_000);
      const postback = await signPostback(gateway.privateKeyPem);
      const refused = await deliver(world.receiverUrl, postback);
      assert.equal(refused.status, 503);
      assert.equal(refused.code, 'postback.receiver.overloaded');
      assert.equal(refused.body.retryable, true);
      assert.equal(refused.headers.get('retry-after'), '5');
      assert.equal(world.application.received.length, 0, 'nothing delivered');

      held.length = 0;
      gc();
      await waitFor('shedding over', async () => (await shedding(adminUrl)) === 0, 5_000);
      const taken = await deliver(world.receiverUrl, postback);
      assert.equal(taken.status, 200);
      await world.application.waitFor(1);
      const text = await (await fetch(`${adminUrl}/metrics`)).text();
      assert.match(text, /^signing_sidecar_requests_shed_total\{listener="postback"\} 1$/m);
      assert.match(text, /^signing_sidecar_postbacks_total\{outcome="overloaded"\} 1$/m);
    } finally {
      held.length = 0;
      await world.stop();
    }
  });
});
