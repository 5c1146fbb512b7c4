import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { depositJson } from '../support/payloads.js';
import { startRedis } from '../support/redis-server.js';
import { withReadySidecar } from '../support/sidecar.js';

async function metrics(adminUrl: string): Promise<string> {
  return (await fetch(`${adminUrl}/metrics`)).text();
}

async function waitForMetric(adminUrl: string, pattern: RegExp, timeoutMs = 10_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!pattern.test(await metrics(adminUrl))) {
    if (Date.now() > deadline) throw new Error(`metric ${pattern} not seen in time`);
    await sleep(50);
  }
}

async function pay(egressUrl: string): Promise<number> {
  const response = await fetch(`${egressUrl}/api/v2/transaction/init`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: depositJson({ amount: '10.00' }),
  });
  await response.arrayBuffer();
  return response.status;
}

describe('the sidecar with SIDECAR_STATE_STORE=redis', () => {
  it('starts and serves while Redis is down, reports the store down, then up once Redis is there', async () => {
    const redis = await startRedis({ user: true });
    try {
      await redis.stop();
      const env = {
        SIDECAR_STATE_STORE: 'redis',
        SIDECAR_REDIS_URL: redis.url,
        SIDECAR_REDIS_USERNAME: redis.username,
        SIDECAR_REDIS_PASSWORD_FILE: redis.passwordFile,
      };
      const startedAt = performance.now();
      // Its login alone waits until Redis has been away 5 s since the start (a blip is waited out, not answered by a
      // login that would log every other replica out): ready within 15 s, not the helper's 5.
      const readyWithinMs = 15_000;
      await withReadySidecar(
        env,
        async ({ running }) => {
          const readyAfter = performance.now() - startedAt;
          assert.ok(readyAfter >= 5_000, `its own token after ${readyAfter.toFixed(0)} ms, not before 5 s`);
          const { egressUrl, adminUrl } = running.sidecar;
          assert.equal(await pay(egressUrl), 201);
          assert.match(await metrics(adminUrl), /^signing_sidecar_state_store_up 0$/m);
          assert.equal(running.sidecar.store.isAvailable(), false);
          await redis.start();
          await waitForMetric(adminUrl, /^signing_sidecar_state_store_up 1$/m);
          assert.equal(await pay(egressUrl), 201);
          const text = await metrics(adminUrl);
          assert.match(
            text,
            /signing_sidecar_state_store_command_duration_seconds_count\{command="get",outcome="timeout"\} \d+/,
          );
          const events = running.logs.lines().map((line) => line.event);
          assert.ok(events.includes('state_store.down') && events.includes('state_store.up'), events.join(','));
          assert.equal(running.logs.text.includes(redis.password!), false, 'the Redis password is never logged');
        },
        undefined,
        readyWithinMs,
      );
    } finally {
      await redis.close();
    }
  });

  it('with the memory store (the default) reports the store up and counts evictions from zero', async () => {
    await withReadySidecar({}, async ({ running }) => {
      const text = await metrics(running.sidecar.adminUrl);
      assert.match(text, /^signing_sidecar_state_store_up 1$/m);
      assert.match(text, /^signing_sidecar_state_store_evictions_total 0$/m);
      assert.equal(running.sidecar.store.kind, 'memory');
    });
  });
});
