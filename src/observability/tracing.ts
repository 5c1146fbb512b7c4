// The tracing seam (docs/operations.md, "Tracing"). The request path calls only this interface; with tracing off it
// gets NO_TRACING, whose spans are one shared object that does nothing, so that a pod that exports no traces neither
// loads OpenTelemetry nor allocates anything per request for it. The OpenTelemetry implementation is otel-tracing.ts,
// loaded by dynamic import when the SDK's own environment variables ask for traces (config/tracing.ts).

/** A span's identity as plain values (W3C trace context): the parent of the spans made under it. */
export interface TraceContext {
  /** 32 lowercase hex digits. */
  readonly traceId: string;
  /** 16 lowercase hex digits. */
  readonly spanId: string;
  /** W3C trace flags (bit 0: sampled). */
  readonly traceFlags: number;
  /** The caller's tracestate header, passed along unchanged. */
  readonly traceState?: string | undefined;
  /** True for a context that came from another process (a caller's traceparent). */
  readonly remote?: boolean | undefined;
}

export type SpanKind = 'server' | 'client' | 'internal';

/** Attribute values; undefined ones are left out. Never a payload, token, signature, key or Idempotency-Key. */
export type SpanAttributes = Readonly<Record<string, string | number | boolean | undefined>>;

export interface TraceSpan {
  /** This span's context, the parent of its children and the ids of log lines; undefined when tracing is off. */
  readonly context: TraceContext | undefined;
  setAttributes(attributes: SpanAttributes): void;
  /** Marks the span failed (status ERROR), with the code that says why (a cause code, or a sidecar.* code). */
  fail(code: string | undefined): void;
  end(): void;
}

export interface Tracing {
  /** False for NO_TRACING: callers may skip building attributes nobody will read. */
  readonly enabled: boolean;
  /** A span under `parent` (a new trace without one). */
  startSpan(name: string, kind: SpanKind, parent: TraceContext | undefined, attributes?: SpanAttributes): TraceSpan;
  /** The caller's trace context from its traceparent / tracestate headers; undefined when absent or invalid. */
  extract(
    traceparent: string | string[] | undefined,
    tracestate: string | string[] | undefined,
  ): TraceContext | undefined;
  /** The traceparent (and tracestate) headers that continue `context` at the next hop. */
  headers(context: TraceContext): Readonly<Record<string, string>>;
  /** Exports what is still buffered and stops (shutdown). */
  shutdown(): Promise<void>;
}

const NO_SPAN: TraceSpan = {
  context: undefined,
  setAttributes: () => undefined,
  fail: () => undefined,
  end: () => undefined,
};

const NO_HEADERS: Readonly<Record<string, string>> = Object.freeze({});

/** Tracing off: every call is a no-op on shared objects. */
export const NO_TRACING: Tracing = {
  enabled: false,
  startSpan: () => NO_SPAN,
  extract: () => undefined,
  headers: () => NO_HEADERS,
  shutdown: () => Promise.resolve(),
};
