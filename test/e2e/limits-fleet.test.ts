// Money limits for a fleet: three real sidecars on one real Redis, sixteen callers racing for the last of an hourly
// cap. The gateway (the real simulator) must hold at most the cap, to the cent, and exactly what was answered 200.
import assert from 'node:assert/strict';
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { limits } from '../../src/cli/limits.js';
import { startFleet } from '../support/fleet-world.js';
import { sidecarEnv } from '../support/sidecar.js';
import { runCommand } from '../tools/run-command.js';
import { scratchDir } from '../support/scratch.js';
import { postJson } from '../support/sim-world.js';

const WITHDRAWAL = '/api/v2/transfer-out/init';
const CAP_CENTS = 250_000;

describe('money limits shared by a fleet on Redis', () => {
  it('16 callers on 3 replicas race past an hourly cap: the gateway receives at most the cap, to the cent', async (t) => {
    const rulesFile = join(scratchDir('limits-fleet-'), 'limits.yaml');
    await writeFile(
      rulesFile,
      `rules:
  - name: withdrawals-usd
    route: ${WITHDRAWAL}
    currency: USD
    windows: [{ period: 1h, maxTotal: "2500.00" }]
`,
    );
    const fleet = await startFleet({
      replicas: 3,
      accessTokenTtlSeconds: 120,
      env: { SIDECAR_LIMITS_FILE: rulesFile, SIDECAR_LOG_LEVEL: 'warn' },
    });
    try {
      let invoice = 0;
      const paidCents: number[] = [];
      const statuses = new Map<string, number>();
      const caller = async (worker: number): Promise<void> => {
        // Each caller stops after its third refusal: by then the window is full for everyone.
        for (let refusals = 0, i = 0; refusals < 3; i++) {
          // 13.37 to 52.09: uneven cents, so that only exact arithmetic meets the cap exactly.
          const cents = 1_337 + ((worker * 7_919 + i * 104_729) % 3_873);
          const pod = fleet.pods[(worker + i) % fleet.pods.length]!;
          const amount = `${Math.floor(cents / 100)}.${String(cents % 100).padStart(2, '0')}`;
          const body = JSON.stringify({
            amount,
            currency: 'USD',
            user_id: `u-${worker}`,
            invoice_no: `f-${++invoice}`,
          });
          const answer = await postJson(pod.sidecar.egressUrl, body, WITHDRAWAL);
          const label = `${answer.status} ${answer.code ?? ''}`.trim();
          statuses.set(label, (statuses.get(label) ?? 0) + 1);
          if (answer.status === 200) paidCents.push(cents);
          else if (answer.code === 'sidecar.limit.exceeded') refusals++;
          else assert.fail(`unexpected answer ${answer.status} ${answer.body}`);
        }
      };
      await Promise.all(Array.from({ length: 16 }, (_, worker) => caller(worker)));
      const held = fleet.simulator
        .transactions()
        .filter((tx) => tx.type === 'withdrawal')
        .reduce((sum, tx) => sum + Math.round(Number(tx.amount) * 100), 0);
      const answered = paidCents.reduce((a, b) => a + b, 0);
      t.diagnostic(`answers ${JSON.stringify(Object.fromEntries(statuses))}; gateway holds ${held / 100} of 2500.00`);
      assert.ok(held <= CAP_CENTS, `the gateway holds ${held} cents, over the cap`);
      assert.equal(held, answered, 'the gateway holds exactly what was answered 200');
      // The race filled the window: what is left is less than the largest payment.
      assert.ok(CAP_CENTS - held < 5_210, `the window was used up (${CAP_CENTS - held} cents left)`);
      const perPod = await Promise.all(
        fleet.pods.map(async (pod) => {
          const text = await pod.sidecar.metrics.registry.getSingleMetricAsString('signing_sidecar_limit_use_ratio');
          return Number(/window="1h"} ([0-9.]+)/.exec(text)?.[1]);
        }),
      );
      for (const ratio of perPod) assert.equal(ratio, held / CAP_CENTS, 'every replica shows the fleet’s use');
      // The operator's view, from Redis, as `signing-sidecar limits` prints it anywhere with the same settings.
      const env = await sidecarEnv(fleet.keys, fleet.simulator.baseUrl, {
        SIDECAR_STATE_STORE: 'redis',
        SIDECAR_REDIS_URL: fleet.redis.url,
        SIDECAR_LIMITS_FILE: rulesFile,
      });
      const printed = await runCommand(limits, [], env);
      assert.equal(printed.code, 0, printed.stderr);
      const used = (held / 100).toFixed(2);
      const left = ((CAP_CENTS - held) / 100).toFixed(2);
      assert.match(printed.stdout, new RegExp(`^withdrawals-usd +enforce +1h +USD +${used} +2500\\.00 +${left}$`, 'm'));
    } finally {
      await fleet.close();
    }
  });
});
