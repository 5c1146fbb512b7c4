// The gateway stand-in, its own process so that its CPU never counts against what is measured, and as cheap as
// possible: the token endpoint hands out tokens (spec 2.1's fields), and every other POST gets one precomputed 201
// if it carries a token handed out here and the three signing headers, else 401. So a sidecar that stopped signing
// shows up as errors; the signatures themselves are the strict simulator's business. Exits when stdin closes.
import { randomBytes } from 'node:crypto';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';

const issued = new Set<string>();
const ANSWER = JSON.stringify({ transaction_link: 'https://pay.example/t/bench', status: 'PENDING' });
const REJECTED = JSON.stringify({ code: 'FAILED', message: 'token or signing headers missing' });
const inMinutes = (m: number): string => new Date(Date.now() + m * 60_000).toISOString();

const server = createServer((req, res) => {
  req.resume(); // the body is not read
  req.on('end', () => {
    if (req.url !== '/api/v2/auth/token') return signed(req) ? send(res, 201, ANSWER) : send(res, 401, REJECTED);
    const token = randomBytes(16).toString('hex');
    issued.add(token);
    const expiries = { access_token_expires_at: inMinutes(15), refresh_token_expires_at: inMinutes(480) };
    send(res, 200, JSON.stringify({ access_token: token, refresh_token: `r${token}`, ...expiries }));
  });
});

function signed({ headers: h }: IncomingMessage): boolean {
  const token = h.authorization?.startsWith('Bearer ') ? h.authorization.slice(7) : '';
  return issued.has(token) && ['x-signature', 'x-nonce', 'x-timestamp'].every((name) => h[name] !== undefined);
}

function send(res: ServerResponse, status: number, body: string): void {
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) });
  res.end(body);
}

server.listen(0, '127.0.0.1', () =>
  console.log(JSON.stringify({ url: `http://127.0.0.1:${(server.address() as AddressInfo).port}` })),
);
process.stdin.once('end', () => process.exit(0)).resume();
