import { randomBytes } from 'node:crypto';
import { createServer, type IncomingHttpHeaders, type Server, type ServerResponse } from 'node:http';
import { closeNow, listenOnLoopback } from './loopback-server.js';

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
  /** Exact bytes, for answers that are not (valid) JSON text. */
  | { readonly status: number; readonly raw: Buffer }
  | { readonly reset: true }
  | { readonly hang: true };

/**
 * A minimal gateway stand-in for the proxy's own tests: it records every request it receives, issues tokens
 * with rotation, and answers signed routes from a script. The strict simulator (packages/simulator) is the
 * end-to-end counterpart; this one lets a test see the exact bytes that arrived.
 */
export class RecordingGateway {
  readonly requests: RecordedRequest[] = [];
  readonly grants: TokenGrantRecord[] = [];
  readonly script: Scripted[] = [];
  accessTtlSeconds = 900;
  refreshTtlSeconds = 8 * 3600;
  refusePasswordLogins = false;
  /** When true, every signed request is answered 401 FAILED whatever its token. */
  rejectAllTokens = false;
  private validRefresh = new Map<string, number>();
  /** Answers are held until this many signed requests have arrived (makes concurrency tests deterministic). */
  holdUntil = 0;
  private readonly held: Array<() => void> = [];
  private readonly validAccess = new Map<string, number>();
  private sessionRefreshExpiry = 0;
  private readonly server: Server;
  url = '';

  constructor() {
    this.server = createServer((req, res) => {
      const chunks: Buffer[] = [];
      req.on('data', (c: Buffer) => chunks.push(c));
      req.on('end', () => {
        const record = {
          method: req.method ?? '',
          url: req.url ?? '',
          headers: req.headers,
          body: Buffer.concat(chunks).toString('utf8'),
        };
        if (record.url.endsWith('/api/v2/auth/token')) return this.token(record, res);
        this.requests.push(record);
        const respond = () => {
          if (!this.tokenAccepted(record.headers.authorization)) {
            return json(res, 401, { code: 'FAILED', message: 'access token invalid, expired or superseded' });
          }
          this.answer(res);
        };
        this.held.push(respond);
        if (this.requests.length >= this.holdUntil) this.held.splice(0).forEach((release) => release());
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

  /** Access tokens issued so far, newest last. */
  readonly issuedAccessTokens: string[] = [];

  private token(record: RecordedRequest, res: ServerResponse): void {
    const body = JSON.parse(record.body) as Record<string, string>;
    const grant = body.grant_type ?? '';
    const refreshToken = body.refresh_token;
    this.grants.push({ grant, ...(refreshToken !== undefined ? { refreshToken } : {}) });
    const now = Date.now();
    const refreshExpiry = refreshToken === undefined ? undefined : this.validRefresh.get(refreshToken);
    const ok =
      grant === 'password'
        ? !this.refusePasswordLogins &&
          body.username === 'vendor@example.com' &&
          body.password === 'correct horse battery staple'
        : refreshExpiry !== undefined && refreshExpiry > now;
    if (!ok) return json(res, 401, { code: 'FAILED', message: 'invalid grant' });
    if (grant === 'password') {
      // Spec 4.1 rule 3: a password login invalidates the access tokens issued before it.
      this.validAccess.clear();
      this.sessionRefreshExpiry = now + this.refreshTtlSeconds * 1000;
    }
    const access = `at-${randomBytes(12).toString('hex')}`;
    const refresh = `rt-${randomBytes(12).toString('hex')}`;
    // Rotation: the new refresh token is the only valid one.
    this.validRefresh = new Map([[refresh, this.sessionRefreshExpiry]]);
    this.validAccess.set(access, now + this.accessTtlSeconds * 1000);
    this.issuedAccessTokens.push(access);
    this.issuedRefreshTokens.push(refresh);
    json(res, 200, {
      access_token: access,
      access_token_expires_at: new Date(now + this.accessTtlSeconds * 1000).toISOString(),
      refresh_token: refresh,
      refresh_token_expires_at: new Date(this.sessionRefreshExpiry).toISOString(),
    });
  }

  /** Refresh tokens issued so far, newest last (log-secret checks need every one, used or not). */
  readonly issuedRefreshTokens: string[] = [];

  /** Answers every held signed request now (with holdUntil set high, a test decides when answers go out). */
  release(): void {
    this.held.splice(0).forEach((respond) => respond());
  }

  /** Makes the gateway refuse this access token from now on, as if superseded. */
  revokeAccessToken(token: string): void {
    this.validAccess.delete(token);
  }

  /** Makes the gateway refuse the current refresh token (the refresh grant then fails). */
  revokeRefreshTokens(): void {
    this.validRefresh.clear();
  }

  private tokenAccepted(authorization: string | undefined): boolean {
    if (this.rejectAllTokens) return false;
    const token = authorization?.replace(/^Bearer /, '') ?? '';
    const expiry = this.validAccess.get(token);
    return expiry !== undefined && expiry > Date.now();
  }

  private answer(res: ServerResponse): void {
    const next = this.script.shift() ?? {
      status: 201,
      body: { transaction_link: 'https://pay.example/t/1', status: 'PENDING' },
    };
    if ('reset' in next) return void res.socket?.resetAndDestroy();
    if ('hang' in next) return;
    if ('raw' in next) {
      res.writeHead(next.status, { 'content-type': 'application/json', 'content-length': next.raw.length });
      return void res.end(next.raw);
    }
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
