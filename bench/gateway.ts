import { randomBytes } from 'node:crypto';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { TOKEN_PATH } from '../src/token/token-client.js';

// Fixed so the sidecar's password file and the stand-in agree without passing secrets on a command line.
export const BENCH_USERNAME = 'bench@example.com';
export const BENCH_PASSWORD = 'bench password, loopback only';
export const SIGNED_ROUTE = '/api/v2/transaction/init';
const ACCESS_TTL_MS = 15 * 60_000;
const REFRESH_TTL_MS = 8 * 3600_000;

// One precomputed answer: the stand-in must cost as little CPU as possible, so the numbers describe the sidecar.
const SIGNED_ANSWER = Buffer.from(JSON.stringify({ transaction_link: 'https://pay.example/t/bench', status: 'PENDING' }));
const SIGNED_HEADERS = { 'content-type': 'application/json', 'content-length': String(SIGNED_ANSWER.length) };

/**
 * A minimal, fast gateway stand-in: the token endpoint (password and refresh grants, spec 2.1 fields) and
 * signed routes that answer 201 at once. It checks that the signing headers and a bearer token it issued are
 * present (so a sidecar that stopped signing shows up as non-2xx), but does not verify signatures: the strict
 * simulator does that, and RSA verification here would take CPU from the process being measured.
 */
export function createStandIn(): Server {
  const access = new Set<string>();
  // Each login starts its own rotation chain, so the bench's own direct client never invalidates the sidecar's.
  const refresh = new Set<string>();
  return createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      if (req.method !== 'POST') return json(res, 405, { code: 'method', message: 'POST only' });
      if (req.url === TOKEN_PATH) return grant(Buffer.concat(chunks), res);
      if (!signedHeadersPresent(req, access)) return json(res, 401, { code: 'FAILED', message: 'token or signature headers missing' });
      res.writeHead(201, SIGNED_HEADERS);
      res.end(SIGNED_ANSWER);
    });
  });

  function grant(body: Buffer, res: ServerResponse): void {
    let fields: Record<string, unknown>;
    try {
      fields = JSON.parse(body.toString('utf8')) as Record<string, unknown>;
    } catch {
      return json(res, 400, { code: 'FAILED', message: 'invalid JSON' });
    }
    const ok =
      fields.grant_type === 'password'
        ? fields.username === BENCH_USERNAME && fields.password === BENCH_PASSWORD
        : fields.grant_type === 'refresh_token' && typeof fields.refresh_token === 'string' && refresh.delete(fields.refresh_token);
    if (!ok) return json(res, 401, { code: 'FAILED', message: 'invalid grant' });
    const now = Date.now();
    const token = `at-${randomBytes(12).toString('hex')}`;
    access.add(token);
    const next = `rt-${randomBytes(12).toString('hex')}`;
    refresh.add(next);
    json(res, 200, {
      access_token: token,
      access_token_expires_at: new Date(now + ACCESS_TTL_MS).toISOString(),
      refresh_token: next,
      refresh_token_expires_at: new Date(now + REFRESH_TTL_MS).toISOString(),
    });
  }
}

function signedHeadersPresent(req: IncomingMessage, access: Set<string>): boolean {
  const h = req.headers;
  const bearer = h.authorization?.startsWith('Bearer ') === true ? h.authorization.slice(7) : '';
  return access.has(bearer) && h['x-signature'] !== undefined && h['x-nonce'] !== undefined && h['x-timestamp'] !== undefined;
}

function json(res: ServerResponse, status: number, body: unknown): void {
  const text = JSON.stringify(body);
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(text) });
  res.end(text);
}

export function listenOnLoopback(server: Server): Promise<string> {
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => resolve(`http://127.0.0.1:${(server.address() as AddressInfo).port}`));
  });
}
