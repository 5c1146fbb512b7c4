import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { GATEWAY_ERROR_CODES, METRICS } from '../../src/observability/metric-names.js';
import { SidecarMetrics } from '../../src/observability/metrics.js';
import { errorLabel } from '../../src/upstream/gateway-answer.js';

const info = { version: '1.2.3', environment: 'staging', keyFingerprint: 'ab'.repeat(32) };

describe('SidecarMetrics', () => {
  it('exposes every alerting series before the first event: error codes, token calls and retries at zero', async () => {
    const metrics = new SidecarMetrics(info);
    metrics.initSigner('file');
    const text = await metrics.registry.metrics();
    for (const code of GATEWAY_ERROR_CODES)
      assert.match(text, new RegExp(`^${METRICS.gatewayErrors}\\{code="${code.replace(/\./g, '\\.')}"\\} 0$`, 'm'));
    for (const grant of ['password', 'refresh_token']) {
      for (const outcome of ['success', 'rejected', 'error'])
        assert.ok(text.includes(`${METRICS.tokenRequests}{grant="${grant}",outcome="${outcome}"} 0`));
    }
    for (const reason of ['token_rejected', 'connect_failed'])
      assert.ok(text.includes(`${METRICS.retries}{reason="${reason}"} 0`));
    assert.ok(
      text.includes(
        `${METRICS.buildInfo}{version="1.2.3",environment="staging",key_fingerprint="${'ab'.repeat(32)}"} 1`,
      ),
    );
    assert.match(text, new RegExp(`^${METRICS.answerMismatches} 0$`, 'm'));
    assert.match(
      text,
      new RegExp(`^${METRICS.signingDuration}_count{signer="file"} 0$`, 'm'),
      'the signing histogram is there before the first signature',
    );
    assert.ok(text.includes(`${METRICS.signatures}{signer="file",outcome="failure"} 0`));
  });

  it('creates the alerted request failures of every configured route at zero, and nothing else per route', async () => {
    const metrics = new SidecarMetrics(info);
    metrics.initRoutes(['/r']);
    const text = await metrics.registry.metrics();
    for (const code of [
      'sidecar.upstream.outcome_unknown',
      'sidecar.upstream.unreachable',
      'sidecar.token.unavailable',
      'sidecar.internal',
    ]) {
      assert.ok(text.includes(`${METRICS.requests}{route="/r",status_class="5xx",code="${code}"} 0`), code);
    }
    assert.equal(text.includes('code="ok"'), false);
    assert.equal(
      text.includes(`${METRICS.requestDuration}_count`),
      false,
      'a route latency series appears with its first request',
    );
  });

  it('names only counters *_total (promtool rule) and prefixes every metric', async () => {
    const text = await new SidecarMetrics(info).registry.metrics();
    for (const [, name = '', type] of text.matchAll(/^# TYPE (\S+) (\w+)$/gm)) {
      assert.ok(name.startsWith('signing_sidecar_'), `${name} lacks the prefix`);
      assert.equal(name.endsWith('_total'), type === 'counter', `${name} is a ${type}`);
    }
  });

  it('counts every answered request by route, status class and code, across scrapes', async () => {
    const metrics = new SidecarMetrics(info);
    const series = `${METRICS.requests}{route="/r",status_class="2xx",code="ok"}`;
    metrics.requestDone('/r', 201, 'ok', 0.001);
    metrics.requestDone('/r', 200, 'ok', 0.001);
    metrics.requestDone('/r', 502, 'sidecar.upstream.outcome_unknown', 0.001);
    assert.ok((await metrics.registry.metrics()).includes(`${series} 2`));
    metrics.requestDone('/r', 201, 'ok', 0.001);
    const text = await metrics.registry.metrics();
    assert.ok(text.includes(`${series} 3`), 'the second scrape adds only what came since the first');
    assert.ok(
      text.includes(`${METRICS.requests}{route="/r",status_class="5xx",code="sidecar.upstream.outcome_unknown"} 1`),
    );
    assert.ok(text.includes(`${METRICS.requestDuration}_count{route="/r"} 4`));
  });

  it('buckets latencies from sub-millisecond to seconds', async () => {
    const metrics = new SidecarMetrics(info);
    metrics.initSigner('file');
    metrics.signed('file', 'success', 0.0002);
    metrics.gatewayRoundTrip('/r', 3);
    const text = await metrics.registry.metrics();
    assert.ok(
      text.includes(`${METRICS.signingDuration}_bucket{le="0.00025",signer="file"} 1`),
      'a 0.2 ms signature has its own bucket',
    );
    assert.ok(text.includes(`${METRICS.signingDuration}_bucket{le="0.0001",signer="file"} 0`));
    assert.ok(text.includes(`${METRICS.gatewayDuration}_bucket{le="5",route="/r"} 1`));
    assert.ok(text.includes(`${METRICS.gatewayDuration}_bucket{le="2.5",route="/r"} 0`));
  });

  it('exports cumulative buckets, +Inf, sum and count per route', async () => {
    const metrics = new SidecarMetrics(info);
    for (const seconds of [0.0001, 0.00009, 0.0002, 0.00025, 0.7, 11]) metrics.requestDone('/a', 201, 'ok', seconds);
    metrics.requestDone('/b', 201, 'ok', 0.3);
    const text = await metrics.registry.metrics();
    const name = METRICS.requestDuration;
    assert.ok(text.includes(`${name}_bucket{le="0.0001",route="/a"} 2`), 'a value on a bound is in that bound');
    assert.ok(text.includes(`${name}_bucket{le="0.00025",route="/a"} 4`));
    assert.ok(text.includes(`${name}_bucket{le="10",route="/a"} 5`));
    assert.ok(text.includes(`${name}_bucket{le="+Inf",route="/a"} 6`));
    assert.ok(text.includes(`${name}_count{route="/a"} 6`));
    assert.match(text, new RegExp(`^${name}_sum\\{route="/a"\\} 11\\.70064`, 'm'));
    assert.ok(text.includes(`${name}_bucket{le="0.25",route="/b"} 0`));
    assert.ok(text.includes(`${name}_bucket{le="0.5",route="/b"} 1`));
  });

  it('counts answers refused for a correlation mismatch', async () => {
    const metrics = new SidecarMetrics(info);
    metrics.answerMismatch();
    metrics.answerMismatch();
    assert.match(await metrics.registry.metrics(), new RegExp(`^${METRICS.answerMismatches} 2$`, 'm'));
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
