// The floor: the least a Node signing proxy can do with the sidecar's parts (node:http in, its signer on libuv's
// pool, undici out) and nothing else: no validation, token lifecycle, retry rules, logs or metrics. A yardstick,
// never a product. Reads the sidecar's settings; logs in, then prints {"url"}.
import { createPrivateKey } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { createServer, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Pool } from 'undici';
import { createSigner } from '../src/signing/signer.js';
import { signingString } from '../src/signing/signing-string.js';

const setting = (name: string): string => process.env[name] ?? '';
const base = setting('SIDECAR_BASE_URL');
const signer = createSigner(createPrivateKey(readFileSync(setting('SIDECAR_PRIVATE_KEY_FILE'))));
const gateway = new Pool(base, { connections: 64, headersTimeout: 30_000, bodyTimeout: 30_000 });
const login = await gateway.request({
  method: 'POST',
  path: '/api/v2/auth/token',
  headers: { 'content-type': 'application/json' },
  body: JSON.stringify({
    grant_type: 'password',
    username: setting('SIDECAR_USERNAME'),
    password: readFileSync(setting('SIDECAR_PASSWORD_FILE'), 'utf8').trim(),
  }),
});
const { access_token: token } = (await login.body.json()) as { access_token: string };
let count = 0;

async function forward(path: string, body: Buffer, res: ServerResponse): Promise<void> {
  const data = body.toString('base64');
  const timestamp = String(Math.floor(Date.now() / 1000));
  const nonce = `floor-${(count++).toString(36).padStart(26, '0')}`;
  const signature = await signer.sign(signingString({ method: 'POST', fullUrl: base + path, timestamp, nonce, data }));
  const headers = {
    'content-type': 'application/json',
    authorization: `Bearer ${token}`,
    'x-timestamp': timestamp,
    'x-nonce': nonce,
    'x-signature': signature,
  };
  const answer = await gateway.request({ method: 'POST', path, headers, body: `{"data":"${data}"}` });
  const bytes = Buffer.from(await answer.body.arrayBuffer());
  res.writeHead(answer.statusCode, { 'content-type': 'application/json', 'content-length': bytes.length });
  res.end(bytes);
}

const server = createServer((req, res) => {
  const chunks: Buffer[] = [];
  req.on('data', (chunk: Buffer) => chunks.push(chunk));
  req.on('end', () => void forward(req.url ?? '/', Buffer.concat(chunks), res).catch(() => res.destroy()));
});
server.listen(0, '127.0.0.1', () =>
  console.log(JSON.stringify({ url: `http://127.0.0.1:${(server.address() as AddressInfo).port}` })),
);
