// The OpenTelemetry side of the tracing seam (tracing.ts). app.ts imports this file dynamically, and only when
// tracing is on: nothing here, nor the SDK, is loaded by a sidecar that exports no traces. The SDK reads its own
// OTEL_* environment (endpoint, headers, service name, resource attributes, sampler, batching).
import {
  ROOT_CONTEXT,
  SpanKind as OtelSpanKind,
  SpanStatusCode,
  trace,
  type Attributes,
  type Context,
  type Span,
  type TextMapGetter,
  type TextMapSetter,
  type Tracer,
} from '@opentelemetry/api';
import { TraceState, W3CTraceContextPropagator } from '@opentelemetry/core';
import { OTLPTraceExporter } from '@opentelemetry/exporter-trace-otlp-http';
import { defaultResource, detectResources, envDetector, resourceFromAttributes } from '@opentelemetry/resources';
import { BasicTracerProvider, BatchSpanProcessor } from '@opentelemetry/sdk-trace-base';
import type { SpanAttributes, SpanKind, TraceContext, TraceSpan, Tracing } from './tracing.js';

const KINDS: Readonly<Record<SpanKind, OtelSpanKind>> = {
  server: OtelSpanKind.SERVER,
  client: OtelSpanKind.CLIENT,
  internal: OtelSpanKind.INTERNAL,
};

type Carrier = Record<string, string | string[] | undefined>;

const getter: TextMapGetter<Carrier> = {
  keys: (carrier) => Object.keys(carrier),
  get: (carrier, key) => carrier[key],
};

const setter: TextMapSetter<Record<string, string>> = {
  set: (carrier, key, value) => {
    carrier[key] = value;
  },
};

/** The attributes OpenTelemetry takes: undefined values are left out rather than reported as invalid. */
function defined(attributes: SpanAttributes): Attributes {
  const out: Attributes = {};
  for (const name of Object.keys(attributes)) {
    const value = attributes[name];
    if (value !== undefined) out[name] = value;
  }
  return out;
}

function parentContext(parent: TraceContext | undefined): Context {
  if (parent === undefined) return ROOT_CONTEXT;
  return trace.setSpanContext(ROOT_CONTEXT, {
    traceId: parent.traceId,
    spanId: parent.spanId,
    traceFlags: parent.traceFlags,
    isRemote: parent.remote === true,
    ...(parent.traceState === undefined ? {} : { traceState: new TraceState(parent.traceState) }),
  });
}

class OtelSpan implements TraceSpan {
  readonly context: TraceContext;

  constructor(private readonly span: Span) {
    const own = span.spanContext();
    this.context = {
      traceId: own.traceId,
      spanId: own.spanId,
      traceFlags: own.traceFlags,
      traceState: own.traceState?.serialize(),
    };
  }

  setAttributes(attributes: SpanAttributes): void {
    this.span.setAttributes(defined(attributes));
  }

  fail(code: string | undefined): void {
    this.span.setStatus({ code: SpanStatusCode.ERROR, ...(code === undefined ? {} : { message: code }) });
    if (code !== undefined) this.span.setAttribute('error.type', code);
  }

  end(): void {
    this.span.end();
  }
}

class OtelTracing implements Tracing {
  readonly enabled = true;
  private readonly propagator = new W3CTraceContextPropagator();

  constructor(
    private readonly provider: BasicTracerProvider,
    private readonly tracer: Tracer,
  ) {}

  startSpan(name: string, kind: SpanKind, parent: TraceContext | undefined, attributes?: SpanAttributes): TraceSpan {
    const options = { kind: KINDS[kind], ...(attributes === undefined ? {} : { attributes: defined(attributes) }) };
    return new OtelSpan(this.tracer.startSpan(name, options, parentContext(parent)));
  }

  extract(
    traceparent: string | string[] | undefined,
    tracestate: string | string[] | undefined,
  ): TraceContext | undefined {
    if (traceparent === undefined) return undefined;
    const extracted = trace.getSpanContext(this.propagator.extract(ROOT_CONTEXT, { traceparent, tracestate }, getter));
    if (extracted === undefined) return undefined;
    return {
      traceId: extracted.traceId,
      spanId: extracted.spanId,
      traceFlags: extracted.traceFlags,
      traceState: extracted.traceState?.serialize(),
      remote: true,
    };
  }

  headers(context: TraceContext): Readonly<Record<string, string>> {
    const carrier: Record<string, string> = {};
    this.propagator.inject(parentContext(context), carrier, setter);
    return carrier;
  }

  shutdown(): Promise<void> {
    return this.provider.shutdown();
  }
}

/**
 * Tracing to the OTLP/HTTP endpoint of the environment (JSON encoding), spans batched. The resource names the
 * service signing-sidecar and its version; OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES override them.
 */
export function createOtelTracing(version: string): Tracing {
  const resource = defaultResource()
    .merge(resourceFromAttributes({ 'service.name': 'signing-sidecar', 'service.version': version }))
    .merge(detectResources({ detectors: [envDetector] }));
  const provider = new BasicTracerProvider({
    resource,
    spanProcessors: [new BatchSpanProcessor(new OTLPTraceExporter())],
  });
  return new OtelTracing(provider, provider.getTracer('signing-sidecar', version));
}
