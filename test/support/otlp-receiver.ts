// A stand-in OpenTelemetry collector: an OTLP/HTTP receiver (JSON encoding, as the sidecar's exporter sends) on
// 127.0.0.1, port 0. It keeps every body as received (for secret checks) and the spans flattened for assertions.
import { createServer, type Server } from 'node:http';
import { closeNow, listenOnLoopback } from './loopback-server.js';

export type AttributeValue = string | number | boolean;

export interface ReceivedSpan {
  readonly traceId: string;
  readonly spanId: string;
  /** '' for a root span. */
  readonly parentSpanId: string;
  readonly name: string;
  /** OTLP SpanKind: 1 internal, 2 server, 3 client. */
  readonly kind: number;
  readonly attributes: Readonly<Record<string, AttributeValue>>;
  /** OTLP status code: 0 unset, 1 ok, 2 error. */
  readonly statusCode: number;
  readonly statusMessage: string | undefined;
  /** The resource's attributes (service.name...). */
  readonly resource: Readonly<Record<string, AttributeValue>>;
}

export const SPAN_KIND = { internal: 1, server: 2, client: 3 } as const;
export const STATUS_ERROR = 2;

interface OtlpValue {
  stringValue?: string;
  intValue?: string | number;
  doubleValue?: number;
  boolValue?: boolean;
}
interface OtlpAttribute {
  key: string;
  value: OtlpValue;
}
interface OtlpSpan {
  traceId: string;
  spanId: string;
  parentSpanId?: string;
  name: string;
  kind: number;
  attributes?: OtlpAttribute[];
  status?: { code?: number; message?: string };
}
interface OtlpExport {
  resourceSpans?: Array<{
    resource?: { attributes?: OtlpAttribute[] };
    scopeSpans?: Array<{ spans?: OtlpSpan[] }>;
  }>;
}

function value(v: OtlpValue): AttributeValue {
  if (v.stringValue !== undefined) return v.stringValue;
  if (v.intValue !== undefined) return Number(v.intValue);
  if (v.doubleValue !== undefined) return v.doubleValue;
  return v.boolValue ?? '';
}

function attributes(list: OtlpAttribute[] | undefined): Record<string, AttributeValue> {
  return Object.fromEntries((list ?? []).map((a) => [a.key, value(a.value)]));
}

export class OtlpReceiver {
  /** Every export request's body, as text. */
  readonly bodies: string[] = [];
  readonly spans: ReceivedSpan[] = [];
  /** Content types of the export requests (the exporter's encoding). */
  readonly contentTypes: string[] = [];
  private readonly server: Server;
  url = '';

  constructor() {
    this.server = createServer((req, res) => {
      const chunks: Buffer[] = [];
      req.on('data', (c: Buffer) => chunks.push(c));
      req.on('end', () => {
        const text = Buffer.concat(chunks).toString('utf8');
        this.bodies.push(text);
        this.contentTypes.push(req.headers['content-type'] ?? '');
        if (req.url === '/v1/traces') this.record(JSON.parse(text) as OtlpExport);
        res.writeHead(200, { 'content-type': 'application/json' }).end('{}');
      });
    });
  }

  async start(): Promise<this> {
    this.url = await listenOnLoopback(this.server);
    return this;
  }

  async stop(): Promise<void> {
    await closeNow(this.server);
  }

  /** The spans of one trace. */
  trace(traceId: string): ReceivedSpan[] {
    return this.spans.filter((s) => s.traceId === traceId);
  }

  /** Resolves once `done` holds for the spans received (polled), or fails after `ms`. */
  async until(what: string, done: (spans: readonly ReceivedSpan[]) => boolean, ms = 5_000): Promise<void> {
    const deadline = Date.now() + ms;
    while (!done(this.spans)) {
      if (Date.now() > deadline) {
        const seen = this.spans.map((s) => `${s.name} ${s.traceId}`).join('\n');
        throw new Error(`no ${what} within ${ms} ms; spans received:\n${seen}`);
      }
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
  }

  private record(body: OtlpExport): void {
    for (const rs of body.resourceSpans ?? []) {
      const resource = attributes(rs.resource?.attributes);
      for (const ss of rs.scopeSpans ?? []) {
        for (const span of ss.spans ?? []) {
          this.spans.push({
            traceId: span.traceId,
            spanId: span.spanId,
            parentSpanId: span.parentSpanId ?? '',
            name: span.name,
            kind: span.kind,
            attributes: attributes(span.attributes),
            statusCode: span.status?.code ?? 0,
            statusMessage: span.status?.message,
            resource,
          });
        }
      }
    }
  }
}
