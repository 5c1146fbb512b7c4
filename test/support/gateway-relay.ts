import { createServer, request, type IncomingHttpHeaders, type Server } from 'node:http';
import { closeNow, listenOnLoopback } from './loopback-server.js';

/**
 * What the relay does to the next signed request (then it goes back to `pass`):
 * - replay: sends the previous signed request again instead (same nonce: signature.nonce.replayed);
 * - tamper: changes `data` after signing (signature.verify.failed, the "altered data" cause of spec 7);
 * - foreign-ip: connects from 127.0.0.2, which no simulator account allowlists by default (403 ip.forbidden).
 */
export type RelayMode = 'pass' | 'replay' | 'tamper' | 'foreign-ip';

/** A signed request as it crossed the relay, byte for byte: what a vendor gets from a packet capture. */
export interface Captured {
  readonly url: string;
  readonly headers: IncomingHttpHeaders;
  readonly body: string;
}

export interface RelayedAnswer {
  readonly status: number;
  readonly headers: IncomingHttpHeaders;
  readonly body: Buffer;
}

/** Sends a captured request to `origin` with its own headers and body (from `localAddress` if given). */
export function sendCaptured(origin: string, out: Captured, localAddress?: string): Promise<RelayedAnswer> {
  const headers: IncomingHttpHeaders = { ...out.headers, 'content-length': String(Buffer.byteLength(out.body)) };
  delete headers.connection;
  delete headers['keep-alive'];
  delete headers['transfer-encoding'];
  return new Promise((resolve, reject) => {
    const upstream = request(`${origin}${out.url}`, {
      method: 'POST',
      headers,
      agent: false,
      ...(localAddress ? { localAddress } : {}),
    });
    upstream.on('response', (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () =>
        resolve({ status: res.statusCode ?? 502, headers: res.headers, body: Buffer.concat(chunks) }),
      );
    });
    upstream.on('error', reject);
    upstream.end(out.body);
  });
}

/** Every secret value that crossed the relay: what a log must never contain. */
export interface SeenSecrets {
  readonly accessTokens: string[];
  readonly refreshTokens: string[];
  readonly signatures: string[];
  readonly data: string[];
}

/**
 * A transparent HTTP relay between the sidecar and the gateway simulator. It lets an end-to-end test provoke the
 * gateway errors that a correct sidecar never causes by itself (a replayed nonce, altered data, a foreign source
 * address) while the simulator still makes the real decision, and it records every token, signature and `data`
 * value that crossed it. Start the simulator with `publicBaseUrl` = the relay's URL so signed URLs match.
 */
export class GatewayRelay {
  mode: RelayMode = 'pass';
  readonly seen: SeenSecrets = { accessTokens: [], refreshTokens: [], signatures: [], data: [] };
  /** Every signed request that arrived from the sidecar, in order. */
  readonly captured: Captured[] = [];
  url = '';
  private last: Captured | undefined;
  private readonly server: Server;

  constructor(private target = '') {
    this.server = createServer((req, res) => {
      const chunks: Buffer[] = [];
      req.on('data', (c: Buffer) => chunks.push(c));
      req.on('end', () => {
        const incoming = { url: req.url ?? '/', headers: req.headers, body: Buffer.concat(chunks).toString('utf8') };
        this.forward(
          this.rewrite(incoming),
          (status, headers, body) => {
            res.writeHead(status, headers);
            res.end(body);
          },
          () => res.socket?.destroy(),
        );
      });
    });
  }

  /** Listens first (its URL is the simulator's public base), then is pointed at the simulator. */
  async start(): Promise<this> {
    this.url = await listenOnLoopback(this.server);
    return this;
  }

  pointAt(target: string): void {
    this.target = target;
  }

  async stop(): Promise<void> {
    await closeNow(this.server);
  }

  private rewrite(incoming: Captured): Captured & { localAddress?: string } {
    if (incoming.url.endsWith('/auth/token')) return incoming;
    this.record(incoming);
    const mode = this.mode;
    this.mode = 'pass';
    if (mode === 'replay' && this.last) return this.last;
    this.last = incoming;
    if (mode === 'foreign-ip') return { ...incoming, localAddress: '127.0.0.2' };
    if (mode === 'tamper') {
      const data = Buffer.from('{"amount":"999999.00","tampered":"yes"}').toString('base64');
      this.seen.data.push(data);
      return { ...incoming, body: JSON.stringify({ data }) };
    }
    return incoming;
  }

  private record(incoming: Captured): void {
    this.captured.push(incoming);
    const signature = incoming.headers['x-signature'];
    if (typeof signature === 'string') this.seen.signatures.push(signature);
    try {
      const { data } = JSON.parse(incoming.body) as { data?: unknown };
      if (typeof data === 'string') this.seen.data.push(data);
    } catch {
      // not an envelope: nothing secret to remember
    }
  }

  private forward(
    out: Captured & { localAddress?: string },
    answer: (status: number, headers: IncomingHttpHeaders, body: Buffer) => void,
    fail: () => void,
  ): void {
    sendCaptured(this.target, out, out.localAddress).then(({ status, headers, body }) => {
      if (out.url.endsWith('/auth/token')) this.recordTokens(body);
      const back = { ...headers };
      delete back.connection;
      delete back['keep-alive'];
      delete back['transfer-encoding'];
      answer(status, back, body);
    }, fail); // the simulator reset the connection (an injected fault): pass the reset on, as a real path would
  }

  private recordTokens(body: Buffer): void {
    try {
      const parsed = JSON.parse(body.toString('utf8')) as { access_token?: unknown; refresh_token?: unknown };
      if (typeof parsed.access_token === 'string') this.seen.accessTokens.push(parsed.access_token);
      if (typeof parsed.refresh_token === 'string') this.seen.refreshTokens.push(parsed.refresh_token);
    } catch {
      // an error answer carries no token
    }
  }
}
