import { randomBytes } from 'node:crypto';
import { createServer, type IncomingHttpHeaders, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';

export interface RecordedRequest {
  readonly method: string;
  readonly url: string;
  readonly headers: IncomingHttpHeaders;
  readonly body: string;
}

export interface TokenGrantRecord {
  readonly grant: string;
  readonly refreshToken?: string;
}

/** What the stand-in does with one signed request: answer, or misbehave after reading it. */
export type Scripted =
  | { readonly status: number; readonly body: unknown; readonly headers?: Record<string, string> }
  | { readonly reset: true }
  | { readonly hang: true };

/**
 * A minimal gateway stand-in for the proxy's own tests: it records every request it receives, issues tokens
 * with rotation, and answers signed routes from a script. The strict simulator (src/simulator) is the
 * end-to-end counterpart; this one lets a test see the exact bytes that arrived.
 */
export class RecordingGateway {
  readonly requests: RecordedRequest[] = [];
  readonly grants: TokenGrantRecord[] = [];
  readonly script: Scripted[] = [];
  accessTtlSeconds = 900;
  refreshTtlSeconds = 8 * 3600;
  refusePasswordLogins = false;
  private validRefresh = new Set<string>();
  private readonly server: Server;
  url = '';

  constructor() {
    this.server = createServer((req, res) => {
      const chunks: Buffer[] = [];
      req.on('data', (c: Buffer) => chunks.push(c));
      req.on('end', () => {
        const record = { method: req.method ?? '', url: req.url ?? '', headers: req.headers, body: Buffer.concat(chunks).toString('utf8') };
        if (record.url.endsWith('/api/v2/auth/token')) return this.token(record, res);
        this.requests.push(record);
        this.answer(res);
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

  /** Access tokens issued so far, newest last. */
  readonly issuedAccessTokens: string[] = [];

  private token(record: RecordedRequest, res: ServerResponse): void {
    const body = JSON.parse(record.body) as Record<string, string>;
    const grant = body.grant_type ?? '';
    const refreshToken = body.refresh_token;
    this.grants.push({ grant, ...(refreshToken !== undefined ? { refreshToken } : {}) });
    const ok =
      grant === 'password'
        ? !this.refusePasswordLogins && body.username === 'vendor@example.com' && body.password === 'correct horse battery staple'
        : refreshToken !== undefined && this.validRefresh.delete(refreshToken);
    if (!ok) return json(res, 401, { code: 'FAILED', message: 'invalid grant' });
    const access = `at-${randomBytes(12).toString('hex')}`;
    const refresh = `rt-${randomBytes(12).toString('hex')}`;
    this.validRefresh = new Set([refresh]);
    this.issuedAccessTokens.push(access);
    const now = Date.now();
    json(res, 200, {
      access_token: access,
      access_token_expires_at: new Date(now + this.accessTtlSeconds * 1000).toISOString(),
      refresh_token: refresh,
      refresh_token_expires_at: new Date(now + this.refreshTtlSeconds * 1000).toISOString(),
    });
  }

  private answer(res: ServerResponse): void {
    const next = this.script.shift() ?? { status: 201, body: { transaction_link: 'https://pay.example/t/1', status: 'PENDING' } };
    if ('reset' in next) return void res.socket?.resetAndDestroy();
    if ('hang' in next) return;
    json(res, next.status, next.body, next.headers);
  }
}

function json(res: ServerResponse, status: number, body: unknown, headers: Record<string, string> = {}): void {
  const text = JSON.stringify(body);
  res.writeHead(status, { 'content-type': 'application/json', 'x-gateway': 'recording', ...headers });
  res.end(text);
}

export const TEST_USERNAME = 'vendor@example.com';
export const TEST_PASSWORD = 'correct horse battery staple';
