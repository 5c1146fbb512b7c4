// Test helpers for the simulator suite. Requests are built by hand with node:http(s) and signed with node:crypto
// directly (never src/signing), so these tests check the simulator against the spec, not against the sidecar.
import { constants, generateKeyPair, randomBytes, sign } from 'node:crypto';
import type { KeyObject } from 'node:crypto';
import { connect } from 'node:net';
import { request as httpRequest } from 'node:http';
import { request as httpsRequest } from 'node:https';
import type { IncomingHttpHeaders } from 'node:http';
import { promisify } from 'node:util';
import { startSimulator } from '@signing-sidecar/simulator';
import type { RunningSimulator, SimulatorOptions } from '@signing-sidecar/simulator';
import { DEPOSIT } from '../support/payloads.js';

export { DEPOSIT };

export const USERNAME = 'vendor@example.com';
export const PASSWORD = 'correct horse battery staple';

export interface TestKeys {
  readonly privateKey: KeyObject;
  readonly publicKeyPem: string;
}

export async function makeKeys(bits = 2048): Promise<TestKeys> {
  const { privateKey, publicKey } = await promisify(generateKeyPair)('rsa', { modulusLength: bits });
  return { privateKey, publicKeyPem: publicKey.export({ type: 'spki', format: 'pem' }).toString() };
}

export function startWithAccount(
  keys: TestKeys,
  extra: Partial<SimulatorOptions> = {},
  account: Record<string, unknown> = {},
): Promise<RunningSimulator> {
  return startSimulator({
    accounts: [{ username: USERNAME, password: PASSWORD, publicKeyPem: keys.publicKeyPem, ...account }],
    ...extra,
  });
}

export interface RawResponse {
  readonly status: number;
  readonly headers: IncomingHttpHeaders;
  readonly text: string;
  json(): Record<string, unknown>;
}

export interface RawRequest {
  readonly method?: string;
  /** The request target exactly as sent (path and query). */
  readonly path: string;
  readonly headers?: Record<string, string>;
  readonly body?: string | Buffer;
  readonly localAddress?: string;
  readonly ca?: string;
}

/** Sends exactly what it is given: no URL normalisation, no automatic headers beyond Host and Content-Length. */
export function send(listenUrl: string, req: RawRequest): Promise<RawResponse> {
  const url = new URL(listenUrl);
  const doRequest = url.protocol === 'https:' ? httpsRequest : httpRequest;
  return new Promise((resolve, reject) => {
    const r = doRequest(
      {
        host: url.hostname.replace(/^\[|\]$/g, ''),
        port: url.port,
        method: req.method ?? 'POST',
        path: req.path,
        headers: req.headers,
        localAddress: req.localAddress,
        ca: req.ca,
        agent: false,
      },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () => {
          const text = Buffer.concat(chunks).toString('utf8');
          resolve({
            status: res.statusCode ?? 0,
            headers: res.headers,
            text,
            json: () => JSON.parse(text) as Record<string, unknown>,
          });
        });
        res.on('error', reject);
      },
    );
    r.on('error', reject);
    r.end(req.body);
  });
}

export async function login(sim: RunningSimulator, password = PASSWORD): Promise<Record<string, string>> {
  const prefix = new URL(sim.baseUrl).pathname.replace(/\/$/, '');
  const res = await send(sim.listenUrl, {
    path: `${prefix}/api/v2/auth/token`,
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ grant_type: 'password', username: USERNAME, password }),
  });
  if (res.status !== 200) throw new Error(`login failed: ${res.status} ${res.text}`);
  return res.json() as Record<string, string>;
}

export function b64(payload: unknown): string {
  return Buffer.from(JSON.stringify(payload), 'utf8').toString('base64');
}

export function signString(key: KeyObject, signingString: string): string {
  return sign('sha256', Buffer.from(signingString, 'utf8'), { key, padding: constants.RSA_PKCS1_PADDING }).toString(
    'base64',
  );
}

export function freshNonce(): string {
  return randomBytes(16).toString('base64url');
}

export interface SignedOptions {
  readonly key: KeyObject;
  readonly token: string;
  readonly path?: string;
  readonly payload?: unknown;
  readonly data?: string;
  /** Base URL the client signs for; defaults to the simulator's own. */
  readonly signedBase?: string;
  readonly timestamp?: string;
  readonly nonce?: string;
  /** Overrides or removes (undefined) headers after signing. */
  readonly headers?: Record<string, string | undefined>;
  /** Replaces the body after signing (the signature still covers `data`). */
  readonly body?: string;
  readonly localAddress?: string;
  readonly ca?: string;
}

/** Builds and sends a signed request the way spec 5.2 describes it. */
export function signedPost(sim: RunningSimulator, o: SignedOptions): Promise<RawResponse> {
  const path = o.path ?? '/api/v2/transaction/init';
  const data = o.data ?? b64(o.payload ?? DEPOSIT);
  const timestamp = o.timestamp ?? String(sim.clock.nowSeconds());
  const nonce = o.nonce ?? freshNonce();
  const signedPath = path.endsWith('?') ? path.slice(0, -1) : path;
  const signingString = `POST.${o.signedBase ?? sim.baseUrl}${signedPath}.${timestamp}.${nonce}.${data}`;
  const headers: Record<string, string> = {
    'content-type': 'application/json',
    authorization: `Bearer ${o.token}`,
    'x-timestamp': timestamp,
    'x-nonce': nonce,
    'x-signature': signString(o.key, signingString),
  };
  for (const [name, value] of Object.entries(o.headers ?? {})) {
    if (value === undefined) delete headers[name];
    else headers[name] = value;
  }
  return send(sim.listenUrl, {
    path,
    headers,
    body: o.body ?? JSON.stringify({ data }),
    localAddress: o.localAddress,
    ca: o.ca,
  });
}

export function codeOf(res: RawResponse): string {
  return String(res.json().code);
}

/** Writes raw bytes on a socket and returns whatever comes back before the server closes (or resets) or 2 s pass. */
export function rawExchange(listenUrl: string, bytes: string): Promise<string> {
  const url = new URL(listenUrl);
  return new Promise((resolve, reject) => {
    const socket = connect(Number(url.port), url.hostname, () => socket.end(bytes));
    let out = '';
    socket.setEncoding('utf8');
    socket.on('data', (chunk: string) => (out += chunk));
    socket.on('close', () => resolve(out));
    socket.on('error', (err: NodeJS.ErrnoException) => (err.code === 'ECONNRESET' ? resolve(out) : reject(err)));
    socket.setTimeout(2000, () => socket.destroy());
  });
}
