import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { tracingRequested } from '../../src/config/tracing.js';
import { NO_TRACING } from '../../src/observability/tracing.js';

describe('tracing is on when the OpenTelemetry SDK environment names an OTLP endpoint', () => {
  it('off without an endpoint, or with blank ones', () => {
    assert.equal(tracingRequested({}), false);
    assert.equal(tracingRequested({ OTEL_EXPORTER_OTLP_ENDPOINT: ' ', OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: '' }), false);
    assert.equal(tracingRequested({ OTEL_SERVICE_NAME: 'x', OTEL_TRACES_SAMPLER: 'always_on' }), false);
  });

  it('on with either endpoint', () => {
    assert.equal(tracingRequested({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://collector:4318' }), true);
    assert.equal(tracingRequested({ OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: 'http://collector:4318/v1/traces' }), true);
  });

  it('off when OTEL_SDK_DISABLED is true (any case), whatever the endpoint', () => {
    for (const disabled of ['true', 'TRUE', ' True ']) {
      const env = { OTEL_EXPORTER_OTLP_ENDPOINT: 'http://collector:4318', OTEL_SDK_DISABLED: disabled };
      assert.equal(tracingRequested(env), false);
    }
    const env = { OTEL_EXPORTER_OTLP_ENDPOINT: 'http://collector:4318', OTEL_SDK_DISABLED: 'false' };
    assert.equal(tracingRequested(env), true);
  });

  it('off when OTEL_TRACES_EXPORTER is none', () => {
    const env = { OTEL_EXPORTER_OTLP_ENDPOINT: 'http://collector:4318', OTEL_TRACES_EXPORTER: 'none' };
    assert.equal(tracingRequested(env), false);
    assert.equal(tracingRequested({ ...env, OTEL_TRACES_EXPORTER: 'otlp' }), true);
  });
});

describe('tracing off: one shared no-op span, nothing per call', () => {
  it('every span is the same object, with no context; extract finds nothing; headers are empty', async () => {
    const a = NO_TRACING.startSpan('a', 'server', undefined);
    const b = NO_TRACING.startSpan('b', 'client', { traceId: '1'.repeat(32), spanId: '2'.repeat(16), traceFlags: 1 });
    assert.equal(a, b);
    assert.equal(a.context, undefined);
    a.setAttributes({ x: 1 });
    a.fail('x');
    a.end();
    assert.equal(NO_TRACING.extract('00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01', undefined), undefined);
    assert.deepEqual(NO_TRACING.headers({ traceId: '1'.repeat(32), spanId: '2'.repeat(16), traceFlags: 1 }), {});
    await NO_TRACING.shutdown();
  });
});
