import { randomBytes } from 'node:crypto';
import { createServer, type Server, type ServerResponse } from 'node:http';
import { closeNow, listenOnLoopback } from './loopback-server.js';

/** A password with the characters JSON escapes, so that an echo of the request's JSON text differs from it. */
export const ECHOED_PASSWORD = 'pa"ss\\word 9f3c';

/**
 * A careless gateway that echoes what it was sent into its error answers (found by a security review):
 * - the first `grants` token grants are granted (so that a refresh token exists to be echoed), every later one is
 *   refused 401 with the grant's secret (password or refresh token) and the request's JSON text in both `code`
 *   and `message`;
 * - the first signed request is answered 400 with its Authorization header (the access token) in `code`; every
 *   later one 401 FAILED, which makes the sidecar refresh and then log in: both refused, echoing.
 * It records every token it issued, for the log checks.
 */
export class EchoingGateway {
  readonly issuedTokens: string[] = [];
  /** Refusals written so far, by grant type. */
  readonly refusals: string[] = [];
  private grants: number;
  private signedCount = 0;
  private readonly server: Server;
  url = '';

  constructor(grants: number) {
    this.grants = grants;
    this.server = createServer((req, res) => {
      const chunks: Buffer[] = [];
      req.on('data', (c: Buffer) => chunks.push(c));
      req.on('end', () => {
        const body = Buffer.concat(chunks).toString('utf8');
        if (req.url?.endsWith('/api/v2/auth/token')) return this.token(body, res);
        const authorization = req.headers.authorization ?? '';
        if (this.signedCount++ === 0) {
          return json(res, 400, { code: `invalid.request ${authorization}`, message: `headers: ${authorization}` });
        }
        json(res, 401, { code: 'FAILED', message: `access token ${authorization} invalid` });
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

  private token(text: string, res: ServerResponse): void {
    const body = JSON.parse(text) as Record<string, string>;
    const grant = body.grant_type ?? '';
    if (this.grants > 0) {
      this.grants--;
      const access = `at-${randomBytes(12).toString('hex')}`;
      const refresh = `rt-${randomBytes(12).toString('hex')}`;
      this.issuedTokens.push(access, refresh);
      const now = Date.now();
      return json(res, 200, {
        access_token: access,
        access_token_expires_at: new Date(now + 900_000).toISOString(),
        refresh_token: refresh,
        refresh_token_expires_at: new Date(now + 8 * 3_600_000).toISOString(),
      });
    }
    this.refusals.push(grant);
    const secret = grant === 'password' ? body.password : body.refresh_token;
    json(res, 401, {
      code: `FAILED ${secret ?? ''} in ${text}`,
      message: `grant refused for ${secret ?? ''}; you sent ${text}`,
    });
  }
}

function json(res: ServerResponse, status: number, body: unknown): void {
  res.writeHead(status, { 'content-type': 'application/json' });
  res.end(JSON.stringify(body));
}
