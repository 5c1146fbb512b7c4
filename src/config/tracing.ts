/**
 * Whether the environment asks for traces: an OTLP endpoint is set (OTEL_EXPORTER_OTLP_ENDPOINT or
 * OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) and the SDK is not disabled (OTEL_SDK_DISABLED=true). The rest of the
 * OpenTelemetry settings (service name, sampler, headers, batching) are the SDK's own, read by the SDK itself.
 */
export function tracingRequested(env: NodeJS.ProcessEnv): boolean {
  if (env.OTEL_SDK_DISABLED?.trim().toLowerCase() === 'true') return false;
  const endpoint = env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT?.trim() || env.OTEL_EXPORTER_OTLP_ENDPOINT?.trim();
  return endpoint !== undefined && endpoint !== '';
}
