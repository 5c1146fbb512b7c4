import { createServer, request, type IncomingHttpHeaders, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';

export interface CapturedRequest {
  readonly method: string;
  readonly path: string;
  readonly headers: IncomingHttpHeaders;
  readonly body: Buffer;
}

/**
 * A plain-HTTP relay on loopback that records every request byte for byte and passes it on unchanged:
 * the "captured request" a vendor would get from a packet capture, used to replay or re-post it.
 */
export class CaptureRelay {
  readonly captured: CapturedRequest[] = [];
  private readonly server: Server;
  url = '';

  /** Where requests are relayed; may be set after start, once the target exists. */
  constructor(public target = '') {
    this.server = createServer((req, res) => {
      const chunks: Buffer[] = [];
      req.on('data', (c: Buffer) => chunks.push(c));
      req.on('end', () => {
        const captured = { method: req.method ?? 'POST', path: req.url ?? '/', headers: req.headers, body: Buffer.concat(chunks) };
        this.captured.push(captured);
        void send(this.target, captured).then(({ status, headers, body }) => {
          res.writeHead(status, headers);
          res.end(body);
        }, () => res.destroy());
      });
    });
  }

  async start(): Promise<this> {
    await new Promise<void>((resolve) => this.server.listen(0, '127.0.0.1', resolve));
    this.url = `http://127.0.0.1:${(this.server.address() as AddressInfo).port}`;
    return this;
  }

  async stop(): Promise<void> {
    this.server.closeAllConnections();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }
}

/** Sends a captured request to `origin` with its own headers and body (Host is rewritten by the socket). */
export function send(origin: string, captured: CapturedRequest): Promise<{ status: number; headers: IncomingHttpHeaders; body: Buffer }> {
  const url = new URL(origin);
  const headers = { ...captured.headers, host: url.host, connection: 'close' };
  return new Promise((resolve, reject) => {
    const req = request({ host: url.hostname, port: url.port, method: captured.method, path: captured.path, headers }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body: Buffer.concat(chunks) }));
    });
    req.on('error', reject);
    req.end(captured.body);
  });
}
