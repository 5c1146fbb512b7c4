import type { Settings } from './schema.js';

/**
 * Traces (docs/operations.md#tracing). `enabled`: the OpenTelemetry SDK's environment asks for them (an OTLP
 * endpoint set, OTEL_SDK_DISABLED not true); the SDK reads the rest of its OTEL_* settings itself.
 */
export type TracingConfig = Settings['tracing'] & { readonly enabled: boolean };

export function tracingSettings(values: Settings['tracing'], env: NodeJS.ProcessEnv): TracingConfig {
  return { ...values, enabled: tracingRequested(env) };
}

/**
 * Whether the environment asks for traces: an OTLP endpoint is set (OTEL_EXPORTER_OTLP_ENDPOINT or
 * OTEL_EXPORTER_OTLP_TRACES_ENDPOINT), the SDK is not disabled (OTEL_SDK_DISABLED=true) and trace export is not
 * either (OTEL_TRACES_EXPORTER=none). The rest of the OpenTelemetry settings (service name, sampler, headers,
 * batching) are the SDK's own, read by the SDK itself.
 */
export function tracingRequested(env: NodeJS.ProcessEnv): boolean {
  if (env.OTEL_SDK_DISABLED?.trim().toLowerCase() === 'true') return false;
  // The SDK's own way to switch trace export off; any other exporter name still means OTLP, the one supported.
  if (env.OTEL_TRACES_EXPORTER?.trim().toLowerCase() === 'none') return false;
  const endpoint = env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT?.trim() || env.OTEL_EXPORTER_OTLP_ENDPOINT?.trim();
  return endpoint !== undefined && endpoint !== '';
}
