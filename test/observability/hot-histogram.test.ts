import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { Histogram, Registry } from 'prom-client';
import { HotHistogram } from '../../src/observability/hot-histogram.js';

const BUCKETS = [0.0001, 0.00025, 0.001, 0.5, 10];
// Values on, between, below and above the bounds, for two label sets.
const OBSERVED: Array<[string, number]> = [
  ['/a', 0.0001], ['/a', 0.00009], ['/a', 0.0002], ['/a', 0.00025], ['/a', 0.7], ['/a', 11], ['/a', 10],
  ['/b', 0.3], ['/b', 0.3], ['/b', 0.0005],
];

/** Text exposition of one registry with the metric name made neutral, for a line-by-line comparison. */
async function exposition(registry: Registry, name: string): Promise<string[]> {
  const text = await registry.metrics();
  return text.split('\n').map((line) => line.replaceAll(name, 'm')).filter((line) => line !== '');
}

describe('HotHistogram', () => {
  it('renders exactly what prom-client renders for the same observations', async () => {
    const reference = new Registry();
    const prom = new Histogram({ name: 'ref_seconds', help: 'h', labelNames: ['route'] as const, buckets: BUCKETS, registers: [reference] });
    const hotRegistry = new Registry();
    const hot = new HotHistogram({ name: 'hot_seconds', help: 'h', labelNames: ['route'] as const, buckets: BUCKETS, registry: hotRegistry });
    for (const [route, value] of OBSERVED) {
      prom.labels(route).observe(value);
      hot.series({ route }).observe(value);
    }
    const expected = await exposition(reference, 'ref_seconds');
    assert.deepEqual(await exposition(hotRegistry, 'hot_seconds'), expected);
    // The comparison is not vacuous: the reference has cumulative buckets, +Inf, _sum and _count per route.
    assert.ok(expected.includes('m_bucket{le="0.00025",route="/a"} 4'));
    assert.ok(expected.includes('m_bucket{le="+Inf",route="/a"} 7'));
    assert.ok(expected.includes('m_count{route="/b"} 3'));
  });

  it('exports a bound series at zero before its first observation, and without labels when it has none', async () => {
    const registry = new Registry();
    new HotHistogram({ name: 'idle_seconds', help: 'h', labelNames: ['route'] as const, buckets: BUCKETS, registry }).series({ route: '/r' });
    const plain = new HotHistogram<never>({ name: 'plain_seconds', help: 'h', labelNames: [], buckets: BUCKETS, registry }).series({});
    plain.observe(0.0002);
    const text = await registry.metrics();
    assert.match(text, /^idle_seconds_bucket\{le="10",route="\/r"\} 0$/m);
    assert.match(text, /^idle_seconds_count\{route="\/r"\} 0$/m);
    assert.match(text, /^plain_seconds_bucket\{le="0\.00025"\} 1$/m);
    assert.match(text, /^plain_seconds_sum 0\.0002$/m);
    assert.match(text, /^# TYPE plain_seconds histogram$/m);
    registry.resetMetrics();
    const reset = await registry.metrics();
    assert.match(reset, /^plain_seconds_bucket\{le="\+Inf"\} 0$/m);
    assert.match(reset, /^plain_seconds_sum 0$/m);
  });
});
