// The guard on the memory store with a clock the test moves: what it lets through, what it refuses, what it gives
// back, and what it reports.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { SidecarError } from '../../src/errors.js';
import { LimitGuard } from '../../src/limits/guard.js';
import { parseLimitRules } from '../../src/limits/rules.js';
import { createLogger } from '../../src/observability/log.js';
import { SidecarMetrics } from '../../src/observability/metrics.js';
import { MemoryStateStore } from '../../src/state/memory-store.js';
import { CapturedOutput } from '../support/sidecar.js';

const ROUTE = '/api/v2/transfer-out/init';
const START = Date.UTC(2026, 10, 29, 12, 0, 0);

function world(rulesYaml: string, shared?: { store: MemoryStateStore; offsetMs: number }) {
  let now = START + (shared?.offsetMs ?? 0);
  const logs = new CapturedOutput();
  const metrics = new SidecarMetrics({ version: 't', environment: 'staging' });
  const store = shared?.store ?? new MemoryStateStore({ now: () => now });
  const guard = new LimitGuard({ store, now: () => now, log: createLogger('info', logs), metrics: metrics.limits });
  guard.use(parseLimitRules(rulesYaml, [ROUTE]));
  let id = 0;
  const pay = (amount: string | undefined, currency = 'USD', end = { ended: false }) =>
    guard.reserve(ROUTE, { amount, currency, user_id: 'u' }, `req-${++id}`, end);
  const refusal = async (amount: string | undefined, currency = 'USD', end = { ended: false }) => {
    try {
      await pay(amount, currency, end);
      return undefined;
    } catch (err) {
      assert.ok(err instanceof SidecarError);
      return `${err.status} ${err.code} ${err.details?.rule ?? ''} ${err.details?.window ?? ''}`.trim();
    }
  };
  const metric = async (name: string) => (await metrics.registry.getSingleMetricAsString(name)).split('\n');
  return {
    guard,
    logs,
    pay,
    refusal,
    metric,
    store,
    advance: (ms: number) => (now += ms),
    close: () => store.close(),
  };
}

const HOURLY = `rules:
  - name: withdrawals-usd
    route: ${ROUTE}
    currency: USD
    maxAmount: "1000.00"
    windows: [{ period: 1h, maxTotal: "5000.00" }]`;

describe('the limit guard', () => {
  it('lets payments through up to the hourly total to the cent, then refuses, and the window rolls on', async () => {
    const w = world(HOURLY);
    try {
      for (let i = 0; i < 5; i++) assert.notEqual(await w.pay('999.99'), undefined);
      // 4,999.95 used: 0.05 fits, 0.06 does not.
      assert.equal(await w.refusal('0.06'), '403 sidecar.limit.exceeded withdrawals-usd 1h');
      assert.equal(await w.refusal('0.05'), undefined);
      assert.equal(await w.refusal('0.01'), '403 sidecar.limit.exceeded withdrawals-usd 1h');
      // An hour and a step (1 min) later the first payments have left the window.
      w.advance(3_600_000 + 60_000);
      assert.equal(await w.refusal('999.99'), undefined);
      const figures = await w.guard.figures();
      assert.deepEqual(
        figures.map((f) => [f.window, f.currency, f.used, f.max, f.left]),
        [['1h', 'USD', '999.99', '5000.00', '4000.01']],
      );
    } finally {
      await w.close();
    }
  });

  it('refuses one payment above maxAmount without counting it', async () => {
    const w = world(HOURLY);
    try {
      assert.equal(await w.refusal('1000.01'), '403 sidecar.limit.exceeded withdrawals-usd payment');
      assert.equal((await w.guard.figures())[0]?.used, '0.00');
    } finally {
      await w.close();
    }
  });

  it('a released payment gives its share back; other currencies are not this rule’s', async () => {
    const w = world(HOURLY);
    try {
      const held = await w.pay('1000.00');
      assert.ok(held !== undefined);
      for (let i = 0; i < 4; i++) await w.pay('1000.00');
      assert.equal(await w.refusal('0.01'), '403 sidecar.limit.exceeded withdrawals-usd 1h');
      await w.guard.release(held, 'req-x');
      assert.equal(await w.refusal('1000.00'), undefined);
      assert.equal(await w.pay('5000000', 'JPY'), undefined, 'a JPY payment: no USD rule covers it, nothing held');
    } finally {
      await w.close();
    }
  });

  it('refuses amounts it cannot count exactly with 400 amount_invalid, naming the field, never the value', async () => {
    const w = world(HOURLY);
    try {
      for (const amount of ['1.005', '-1', '1e3', '0']) {
        const refused = await w.refusal(amount);
        assert.equal(refused, '400 sidecar.limit.amount_invalid');
      }
      await assert.rejects(
        w.guard.reserve(ROUTE, { amount: 12.5, currency: 'USD' }, 'r'),
        (err: SidecarError) => err.message.includes('/amount') && !err.message.includes('12.5'),
      );
      await assert.rejects(w.guard.reserve(ROUTE, { amount: '1.00' }, 'r'), /\/currency/);
    } finally {
      await w.close();
    }
  });

  it('counts payments per minute across currencies, and a rule without a currency counts each apart', async () => {
    const w = world(`rules:
  - name: any
    route: ${ROUTE}
    windows: [{ period: 1h, maxTotal: "100" }]
    maxPerMinute: 3`);
    try {
      await w.pay('100.00', 'USD');
      await w.pay('100', 'JPY');
      assert.equal(await w.refusal('0.01', 'USD'), '403 sidecar.limit.exceeded any 1h');
      await w.pay('50.000', 'KWD');
      assert.equal(await w.refusal('1.000', 'KWD'), '403 sidecar.limit.exceeded any per_minute');
      w.advance(61_000);
      assert.equal(await w.refusal('1.000', 'KWD'), undefined);
      const figures = await w.guard.figures();
      assert.deepEqual(
        figures.map((f) => `${f.window} ${f.currency ?? 'count'} ${f.used}/${f.max}`),
        ['1h JPY 100/100', '1h KWD 51.000/100.000', '1h USD 100.00/100.00', 'per_minute count 1/3'],
      );
    } finally {
      await w.close();
    }
  });

  it('report mode lets every payment through and counts, logs and shows what it would have refused', async () => {
    const w = world(HOURLY.replace('maxAmount', 'mode: report\n    maxAmount'));
    try {
      for (let i = 0; i < 7; i++) assert.notEqual(await w.pay('1000.00'), undefined);
      assert.notEqual(await w.pay('2000.00'), undefined);
      const refusals = await w.metric('signing_sidecar_limit_refusals_total');
      // Two payments past the hour's 5,000 and one above 1,000 at once, then the last past both: 4 would-be refusals.
      assert.ok(refusals.includes('signing_sidecar_limit_refusals_total{rule="withdrawals-usd",mode="report"} 4'));
      const ratio = await w.metric('signing_sidecar_limit_use_ratio');
      assert.ok(
        ratio.includes('signing_sidecar_limit_use_ratio{rule="withdrawals-usd",window="1h"} 1.8'),
        ratio.join(),
      );
      assert.match(w.logs.text, /"event":"limit.would_refuse","rule":"withdrawals-usd","window":"1h"/);
      assert.doesNotMatch(w.logs.text, /1000\.00/, 'no amount in the logs');
    } finally {
      await w.close();
    }
  });

  it('one replica racing itself never lets more than the cap through', async () => {
    const w = world(HOURLY);
    try {
      const outcomes = await Promise.all(Array.from({ length: 40 }, () => w.refusal('250.00')));
      assert.equal(outcomes.filter((o) => o === undefined).length, 20);
      assert.equal((await w.guard.figures())[0]?.used, '5000.00');
    } finally {
      await w.close();
    }
  });

  it('report mode never refuses: an amount it cannot count is sent uncounted, and said', async () => {
    const w = world(HOURLY.replace('maxAmount', 'mode: report\n    maxAmount'));
    try {
      assert.equal(await w.refusal('1.005'), undefined);
      assert.equal(await w.refusal(undefined), undefined);
      assert.equal((await w.guard.figures())[0]?.used, '0.00');
      assert.equal(w.logs.lines().filter((l) => l.event === 'limit.unchecked').length, 2);
    } finally {
      await w.close();
    }
  });

  it('a rule that only counts payments reads no amount', async () => {
    const w = world(`rules: [{ name: rate, route: ${ROUTE}, maxPerMinute: 2 }]`);
    try {
      assert.equal(await w.refusal(undefined, 'not a code'), undefined);
      assert.equal(await w.refusal('-1'), undefined);
      assert.equal(await w.refusal('1.00'), '403 sidecar.limit.exceeded rate per_minute');
    } finally {
      await w.close();
    }
  });

  it('replicas with clocks apart, or with different rules during a rollout, count what the others wrote', async () => {
    const store = new MemoryStateStore();
    const perMinute = `rules: [{ name: rate, route: ${ROUTE}, maxPerMinute: 3 }]`;
    // Two replicas 4 s apart: the one behind counts the payments of the one ahead, written "in its future".
    const ahead = world(perMinute, { store, offsetMs: 4_000 });
    const behind = world(perMinute, { store, offsetMs: 0 });
    const hourly = world(HOURLY, { store, offsetMs: 0 });
    const fourHours = world(HOURLY.replace('period: 1h', 'period: 4h'), { store, offsetMs: 0 });
    try {
      await ahead.pay('1.00');
      await ahead.pay('1.00');
      await behind.pay('1.00');
      assert.equal(await behind.refusal('1.00'), '403 sidecar.limit.exceeded rate per_minute');
      // The 1h window counts in minutes, the 4h one in hours: each keeps the other's buckets.
      await hourly.pay('1000.00');
      await fourHours.pay('1000.00');
      await hourly.pay('1000.00');
      assert.deepEqual(
        (await hourly.guard.figures()).map((f) => f.used),
        ['2000.00'],
        'the 1 h series kept across the 4 h replica’s writes',
      );
      assert.deepEqual(
        (await fourHours.guard.figures()).map((f) => f.used),
        ['1000.00'],
      );
    } finally {
      await store.close();
    }
  });

  it('a record it cannot read is refused as an unavailable store (enforce), never taken for no use', async () => {
    const w = world(HOURLY);
    try {
      await w.store.compareAndSet('limit:withdrawals-usd', undefined, '{"v":1,"series":"forged"}', 60_000);
      assert.equal(await w.refusal('1.00'), '503 sidecar.limit.unavailable');
      assert.equal(await w.refusal('1.00'), '503 sidecar.limit.unavailable');
      assert.equal(w.logs.lines().filter((l) => l.event === 'limit.record_unreadable').length, 1, 'said once');
      await w.store.compareAndDelete('limit:withdrawals-usd', '{"v":1,"series":"forged"}');
      assert.equal(await w.refusal('1.00'), undefined, 'deleted: counted afresh');
    } finally {
      await w.close();
    }
  });

  it('a request already ended when its turn comes writes nothing', async () => {
    const w = world(HOURLY);
    try {
      assert.equal(await w.refusal('1.00', 'USD', { ended: true }), '503 sidecar.limit.unavailable');
      assert.equal((await w.guard.figures())[0]?.used, '0.00');
    } finally {
      await w.close();
    }
  });

  it('rules replaced at run time take effect at the next payment; a route without a rule costs nothing', async () => {
    const w = world(HOURLY);
    try {
      await w.pay('1000.00');
      w.guard.use(parseLimitRules(HOURLY.replace('"5000.00"', '"1000.00"'), [ROUTE]));
      assert.equal(await w.refusal('0.01'), '403 sidecar.limit.exceeded withdrawals-usd 1h', 'the use so far is kept');
      assert.equal(await w.guard.reserve('/api/v2/transaction/init', { amount: 'x' }, 'r'), undefined);
    } finally {
      await w.close();
    }
  });
});
