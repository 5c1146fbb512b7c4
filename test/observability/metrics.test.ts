import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { GATEWAY_ERROR_CODES, METRICS } from '../../src/observability/metric-names.js';
import { SidecarMetrics } from '../../src/observability/metrics.js';
import { errorLabel } from '../../src/proxy/gateway-answer.js';

const info = { version: '1.2.3', environment: 'staging', keyFingerprint: 'ab'.repeat(32) };

describe('SidecarMetrics', () => {
  it('exposes every alerting series before the first event: error codes, token calls and retries at zero', async () => {
    const text = await new SidecarMetrics(info).registry.metrics();
    for (const code of GATEWAY_ERROR_CODES) assert.match(text, new RegExp(`^${METRICS.gatewayErrors}\\{code="${code.replace(/\./g, '\\.')}"\\} 0$`, 'm'));
    for (const grant of ['password', 'refresh_token']) {
      for (const outcome of ['success', 'rejected', 'error']) assert.ok(text.includes(`${METRICS.tokenRequests}{grant="${grant}",outcome="${outcome}"} 0`));
    }
    for (const reason of ['token_rejected', 'connect_failed']) assert.ok(text.includes(`${METRICS.retries}{reason="${reason}"} 0`));
    assert.ok(text.includes(`${METRICS.buildInfo}{version="1.2.3",environment="staging",key_fingerprint="${'ab'.repeat(32)}"} 1`));
  });

  it('names only counters *_total (promtool rule) and prefixes every metric', async () => {
    const text = await new SidecarMetrics(info).registry.metrics();
    for (const [, name = '', type] of text.matchAll(/^# TYPE (\S+) (\w+)$/gm)) {
      assert.ok(name.startsWith('signing_sidecar_'), `${name} lacks the prefix`);
      assert.equal(name.endsWith('_total'), type === 'counter', `${name} is a ${type}`);
    }
  });

  it('counts every answered request once across scrapes, by route, status class and code', async () => {
    const metrics = new SidecarMetrics(info);
    const series = `${METRICS.requests}{route="/r",status_class="2xx",code="ok"}`;
    metrics.requestDone('/r', 201, 'ok', 0.001);
    metrics.requestDone('/r', 200, 'ok', 0.001);
    metrics.requestDone('/r', 502, 'sidecar.upstream.outcome_unknown', 0.001);
    assert.ok((await metrics.registry.metrics()).includes(`${series} 2`));
    metrics.requestDone('/r', 201, 'ok', 0.001);
    const text = await metrics.registry.metrics();
    assert.ok(text.includes(`${series} 3`), 'the second scrape adds only what came since the first');
    assert.ok(text.includes(`${METRICS.requests}{route="/r",status_class="5xx",code="sidecar.upstream.outcome_unknown"} 1`));
    assert.ok(text.includes(`${METRICS.requestDuration}_count{route="/r"} 4`));
  });

  it('buckets latencies from sub-millisecond to seconds', async () => {
    const metrics = new SidecarMetrics(info);
    metrics.signed(0.0002);
    metrics.gatewayRoundTrip('/r', 3);
    const text = await metrics.registry.metrics();
    assert.ok(text.includes(`${METRICS.signingDuration}_bucket{le="0.00025"} 1`), 'a 0.2 ms signature has its own bucket');
    assert.ok(text.includes(`${METRICS.signingDuration}_bucket{le="0.0001"} 0`));
    assert.ok(text.includes(`${METRICS.gatewayDuration}_bucket{le="5",route="/r"} 1`));
    assert.ok(text.includes(`${METRICS.gatewayDuration}_bucket{le="2.5",route="/r"} 0`));
  });
});

describe('gateway error labels', () => {
  it('keeps the contract codes, maps 403 to ip.forbidden and anything else to other', () => {
    assert.equal(errorLabel(201, undefined), undefined);
    assert.equal(errorLabel(401, 'FAILED'), 'FAILED');
    assert.equal(errorLabel(401, 'signature.nonce.replayed'), 'signature.nonce.replayed');
    assert.equal(errorLabel(403, 'whatever'), 'ip.forbidden');
    assert.equal(errorLabel(400, 'envelope.invalid'), 'other');
    assert.equal(errorLabel(503, undefined), 'other');
    assert.equal(errorLabel(401, '__proto__'), 'other');
  });
});
