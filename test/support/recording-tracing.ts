// A Tracing that keeps every span in memory, for tests of where spans are made and what they say, without
// OpenTelemetry. Its ids are counters, so a test can follow the parents.
import type { SpanAttributes, SpanKind, TraceContext, TraceSpan, Tracing } from '../../src/observability/tracing.js';

export interface RecordedSpan {
  readonly name: string;
  readonly kind: SpanKind;
  readonly parent: TraceContext | undefined;
  readonly context: TraceContext;
  readonly attributes: Record<string, string | number | boolean | undefined>;
  failed: string | undefined | false;
  ended: boolean;
}

export class RecordingTracing implements Tracing {
  readonly enabled = true;
  readonly spans: RecordedSpan[] = [];
  private next = 0;

  startSpan(name: string, kind: SpanKind, parent: TraceContext | undefined, attributes?: SpanAttributes): TraceSpan {
    const id = (++this.next).toString(16).padStart(16, '0');
    const context = { traceId: parent?.traceId ?? id.padStart(32, '0'), spanId: id, traceFlags: 1 };
    const span: RecordedSpan = {
      name,
      kind,
      parent,
      context,
      attributes: { ...attributes },
      failed: false,
      ended: false,
    };
    this.spans.push(span);
    return {
      context,
      setAttributes: (more) => Object.assign(span.attributes, more),
      fail: (code) => (span.failed = code),
      end: () => (span.ended = true),
    };
  }

  extract(): TraceContext | undefined {
    return undefined;
  }

  headers(context: TraceContext): Readonly<Record<string, string>> {
    return { traceparent: `00-${context.traceId}-${context.spanId}-01` };
  }

  shutdown(): Promise<void> {
    return Promise.resolve();
  }

  named(name: string): RecordedSpan[] {
    return this.spans.filter((s) => s.name === name);
  }
}
