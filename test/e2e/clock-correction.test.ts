import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { startSimulator } from '@signing-sidecar/simulator';
import { makeKeys } from '../support/keys.js';
import { depositJson } from '../support/payloads.js';
import { TEST_PASSWORD, TEST_USERNAME } from '../support/recording-gateway.js';
import { sidecarEnv, startTestSidecar, waitUntilReady } from '../support/sidecar.js';

// The gateway refuses timestamps more than 5 s ahead of or 60 s behind its clock. The simulator's clock is moved
// through its control API (/_sim/clock), as a test or a vendor would.

async function world(offsetSeconds: number, env: NodeJS.ProcessEnv) {
  const keys = await makeKeys();
  const sim = await startSimulator({
    accounts: [{ username: TEST_USERNAME, password: TEST_PASSWORD, publicKeyPem: keys.publicKeyPem }],
  });
  const set = await fetch(`${sim.baseUrl}/_sim/clock`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ offset_seconds: offsetSeconds }),
  });
  assert.equal(set.status, 200);
  const running = await startTestSidecar(await sidecarEnv(keys, sim.baseUrl, env));
  await waitUntilReady(running.sidecar);
  const stop = async (): Promise<void> => {
    await running.stop();
    await sim.close();
  };
  return { sim, running, stop };
}

async function payments(proxyUrl: string, count: number): Promise<Array<{ status: number; code?: string }>> {
  const answers = [];
  for (let i = 0; i < count; i++) {
    const res = await fetch(`${proxyUrl}/api/v2/transaction/init`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: depositJson({ invoice_no: `inv-clock-${i}` }),
    });
    answers.push({ status: res.status, code: ((await res.json()) as { code?: string }).code });
  }
  return answers;
}

async function metric(adminUrl: string, series: string): Promise<number> {
  const text = await (await fetch(`${adminUrl}/metrics`)).text();
  const line = text.split('\n').find((l) => l.startsWith(`${series} `));
  return line === undefined ? Number.NaN : Number(line.split(' ')[1]);
}

const ON = { SIDECAR_CLOCK_SKEW_CORRECTION: 'true', SIDECAR_CLOCK_SKEW_MAX_CORRECTION_SECONDS: '90' };

describe('clock skew correction (SIDECAR_CLOCK_SKEW_CORRECTION)', () => {
  for (const [what, offset, code] of [
    ['gateway 10 s behind (our timestamps look 10 s ahead)', -10, 'signature.timestamp.future'],
    ['gateway 70 s ahead (our timestamps look 70 s old)', 70, 'signature.timestamp.expired'],
  ] as const) {
    it(`${what}: off, every payment fails with ${code}`, async () => {
      const { running, stop } = await world(offset, {});
      try {
        const answers = await payments(running.sidecar.egressUrl, 3);
        assert.deepEqual(
          answers.map((a) => a.code),
          [code, code, code],
        );
      } finally {
        await stop();
      }
    });

    it(`${what}: on, every payment succeeds, from the first; the correction is a gauge`, async () => {
      const { sim, running, stop } = await world(offset, ON);
      try {
        const answers = await payments(running.sidecar.egressUrl, 3);
        assert.deepEqual(
          answers.map((a) => a.status),
          [200, 200, 200],
        );
        assert.equal(sim.transactions().length, 3);
        const correction = await metric(running.sidecar.adminUrl, 'signing_sidecar_clock_correction_seconds');
        assert.ok(Math.abs(correction - offset) <= 1.5, `correction ${correction} s for an offset of ${offset} s`);
      } finally {
        await stop();
      }
    });
  }

  it('an offset beyond the largest correction is refused and counted: payments keep failing', async () => {
    const { running, stop } = await world(-40, {
      SIDECAR_CLOCK_SKEW_CORRECTION: 'true',
      SIDECAR_CLOCK_SKEW_MAX_CORRECTION_SECONDS: '30',
    });
    try {
      const answers = await payments(running.sidecar.egressUrl, 2);
      assert.deepEqual(
        answers.map((a) => a.code),
        ['signature.timestamp.future', 'signature.timestamp.future'],
      );
      const adminUrl = running.sidecar.adminUrl;
      assert.equal(await metric(adminUrl, 'signing_sidecar_clock_correction_seconds'), 0);
      assert.ok((await metric(adminUrl, 'signing_sidecar_clock_corrections_refused_total')) >= 2);
    } finally {
      await stop();
    }
  });

  it('the gateway clock moves while running: one refused payment re-measures at once, the next succeeds', async () => {
    const { sim, running, stop } = await world(0, ON);
    try {
      assert.equal((await payments(running.sidecar.egressUrl, 1))[0]?.status, 200);
      sim.clock.setOffset(-20);
      const answers = await payments(running.sidecar.egressUrl, 2);
      assert.deepEqual(
        answers.map((a) => a.status),
        [401, 200],
        'the refused one is passed through, not retried; the next is signed with the new offset',
      );
    } finally {
      await stop();
    }
  });
});
