// The floor of this stack: the least a Node signing proxy can do per request with the same parts as the sidecar
// (node:http server, the sidecar's gateway client and signer) and nothing else: no validation, no token
// lifecycle, no retry rules, no logs, no metrics, no request tracking. It is a yardstick, never a product: the
// bench runs it under the same load to show how much of the gap to the signing limit the stack itself takes.
// It speaks the sidecar's start protocol (a JSON "start" line, an admin /readyz), so the bench drives it alike.
import { createPrivateKey } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import { parseBaseAddress } from '../src/config/base-url.js';
import { Secret } from '../src/config/secret.js';
import { createSigner } from '../src/signing/signer.js';
import { signingString } from '../src/signing/signing-string.js';
import { passwordGrant, TOKEN_PATH } from '../src/token/token-client.js';
import { createForwarder } from '../src/upstream/forwarder.js';
import { listenOnLoopback } from './gateway.js';

const env = (name: string): string => {
  const value = process.env[name];
  if (value === undefined) throw new Error(`${name} is not set`);
  return value;
};

const base = env('SIDECAR_BASE_URL');
const signer = createSigner(createPrivateKey(readFileSync(env('SIDECAR_PRIVATE_KEY_FILE'))));
const forwarder = createForwarder(parseBaseAddress(base), { ca: undefined, connectTimeoutMs: 5_000, responseTimeoutMs: 30_000, connections: 64 });
const login = await fetch(`${base}${TOKEN_PATH}`, {
  method: 'POST',
  headers: { 'content-type': 'application/json' },
  body: JSON.stringify(passwordGrant(env('SIDECAR_USERNAME'), new Secret(readFileSync(env('SIDECAR_PASSWORD_FILE'), 'utf8').trim()))),
});
const { access_token: token } = (await login.json()) as { access_token: string };
let nonce = 0;

async function forward(req: IncomingMessage, res: ServerResponse, body: Buffer): Promise<void> {
  const data = body.toString('base64');
  const timestamp = String(Math.floor(Date.now() / 1000));
  const requestNonce = `floor-nonce-${(nonce++).toString(36).padStart(10, '0')}`;
  const path = req.url ?? '/';
  const signature = await signer.sign(signingString({ method: 'POST', fullUrl: `${base}${path}`, timestamp, nonce: requestNonce, data }));
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
const proxyUrl = await listenOnLoopback(proxy);
const adminUrl = await listenOnLoopback(admin);
process.stdout.write(`${JSON.stringify({ event: 'start', proxyUrl, adminUrl })}\n`);
process.once('SIGTERM', () => process.exit(0));
