// The floor of this stack: the least a Node signing proxy can do per request with the same parts as the sidecar
// (node:http server, the sidecar's gateway client, crypto.sign on libuv's pool) and nothing else: no validation, no token
// lifecycle, no retry rules, no logs, no metrics, no request tracking. It is a yardstick, never a product: the
// bench runs it under the same load to show how much of the gap to the signing limit the stack itself takes.
// It speaks the sidecar's start protocol (a JSON "start" line, an admin /readyz), so the bench drives it alike.
import { constants, createPrivateKey, sign } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { parseBaseAddress } from '../src/config/base-url.js';
import { createForwarder } from '../src/upstream/forwarder.js';
import { TOKEN_PATH } from './gateway.js';

const env = (name: string): string => {
  const value = process.env[name];
  if (value === undefined) throw new Error(`${name} is not set`);
  return value;
};

const base = env('SIDECAR_BASE_URL');
const key = createPrivateKey(readFileSync(env('SIDECAR_PRIVATE_KEY_FILE')));
const forwarder = createForwarder(parseBaseAddress(base), { ca: undefined, connectTimeoutMs: 5_000, responseTimeoutMs: 30_000, connections: 64 });
const login = await fetch(`${base}${TOKEN_PATH}`, {
  method: 'POST',
  headers: { 'content-type': 'application/json' },
  body: JSON.stringify({ grant_type: 'password', username: env('SIDECAR_USERNAME'), password: readFileSync(env('SIDECAR_PASSWORD_FILE'), 'utf8').trim() }),
});
const { access_token: token } = (await login.json()) as { access_token: string };
let nonce = 0;

function signAsync(text: string): Promise<string> {
  return new Promise((resolve, reject) => {
    sign('sha256', Buffer.from(text), { key, padding: constants.RSA_PKCS1_PADDING }, (err, signature) => (err ? reject(err) : resolve(signature.toString('base64'))));
  });
}

async function forward(req: IncomingMessage, res: ServerResponse, body: Buffer): Promise<void> {
  const data = body.toString('base64');
  const timestamp = String(Math.floor(Date.now() / 1000));
  const requestNonce = `floor-nonce-${(nonce++).toString(36).padStart(10, '0')}`;
  const path = req.url ?? '/';
  const signature = await signAsync(`POST.${base}${path}.${timestamp}.${requestNonce}.${data}`);
  const headers = { 'content-type': 'application/json', authorization: `Bearer ${token}`, 'x-timestamp': timestamp, 'x-nonce': requestNonce, 'x-signature': signature };
  const outcome = await forwarder.send({ path, headers, body: `{"data":"${data}"}` });
  if (outcome.kind !== 'response') {
    res.writeHead(502);
    res.end();
    return;
  }
  res.writeHead(outcome.response.status, { 'content-type': 'application/json', 'content-length': outcome.response.body.length });
  res.end(outcome.response.body);
}

const proxy = createServer((req, res) => {
  const chunks: Buffer[] = [];
  req.on('data', (chunk: Buffer) => chunks.push(chunk));
  req.on('end', () => void forward(req, res, Buffer.concat(chunks)).catch(() => res.destroy()));
});
const admin = createServer((_req, res) => res.end('ok'));
const listen = (server: ReturnType<typeof createServer>): Promise<string> =>
  new Promise((resolve) => server.listen(0, '127.0.0.1', () => resolve(`http://127.0.0.1:${(server.address() as AddressInfo).port}`)));
const proxyUrl = await listen(proxy);
const adminUrl = await listen(admin);
process.stdout.write(`${JSON.stringify({ event: 'start', proxyUrl, adminUrl })}\n`);
process.once('SIGTERM', () => process.exit(0));
