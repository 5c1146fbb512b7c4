// The postback receiver's test world: an application that records what the receiver hands it, a gateway
// signing key that signs postbacks by the documented scheme, and the real sidecar with its receiver on.
import { randomBytes } from 'node:crypto';
import { createServer, type IncomingHttpHeaders, type Server } from 'node:http';
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { Webhook } from 'standardwebhooks';
import { loadConfig } from '../../src/config/load.js';
import { parsePrivateKey } from '../../src/config/private-key.js';
import { createLogger, type Logger } from '../../src/observability/log.js';
import { SidecarMetrics } from '../../src/observability/metrics.js';
import { createPostbackDelivery } from '../../src/postback/delivery.js';
import {
  createPostbackReceiver,
  type PostbackReceiver,
  type PostbackReceiverDeps,
} from '../../src/postback/receiver.js';
import { newNonce } from '../../src/signing/nonce.js';
import { createSigner } from '../../src/signing/signer.js';
import { signingString } from '../../src/signing/signing-string.js';
import { MemoryStateStore } from '../../src/state/memory-store.js';
import type { StateStore } from '../../src/state/state-store.js';
import { makeKeys, type TestKeys } from '../support/keys.js';
import { scratchDir } from '../support/scratch.js';
import { CapturedOutput, sidecarEnv, startTestSidecar, type TestSidecar } from '../support/sidecar.js';
import { closeNow, listenOnLoopback } from '../support/loopback-server.js';

export const PUBLIC_URL = 'https://Pay.Example.com:443/gateway/postbacks';
/** PUBLIC_URL by the URL rules of spec 5.2: what the gateway signs. */
export const SIGNED_URL = 'https://pay.example.com/gateway/postbacks';
export const PATH = '/gateway/postbacks';

export interface Received {
  readonly headers: IncomingHttpHeaders;
  readonly body: Buffer;
}

/** The application: records every postback delivered to it, answers with `status()` (200 unless told otherwise). */
export class ApplicationStub {
  readonly received: Received[] = [];
  status: () => number = () => 200;
  /** Holds each answer this long (a slow application). */
  delayMs = 0;
  url = '';
  private readonly server: Server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      this.received.push({ headers: req.headers, body: Buffer.concat(chunks) });
      const status = this.status();
      setTimeout(() => res.writeHead(status, { 'content-type': 'text/plain' }).end('ok'), this.delayMs);
    });
  });

  /** `port`: the one it had before a stop(), for an application that comes back where it was. */
  async start(port = 0): Promise<this> {
    this.url = `${await listenOnLoopback(this.server, port)}/internal/postbacks`;
    return this;
  }

  async stop(): Promise<void> {
    await closeNow(this.server);
  }

  async waitFor(count: number, ms = 10_000): Promise<void> {
    const until = Date.now() + ms;
    while (this.received.length < count) {
      if (Date.now() > until) throw new Error(`application got ${this.received.length} of ${count} postbacks`);
      await new Promise((r) => setTimeout(r, 10));
    }
  }
}

/** The gateway's postback key pair; its public half in a PEM file, optionally with other keys beside it. */
export async function gatewayKeys(): Promise<TestKeys> {
  return makeKeys();
}

export async function keyFile(...publicKeysPem: string[]): Promise<string> {
  const file = join(scratchDir('postback-keys-'), 'gateway-postback.pub.pem');
  await writeFile(file, publicKeysPem.join('\n'));
  return file;
}

/** A Standard Webhooks secret as the docs make one: `whsec_` and `openssl rand -base64 32`. */
export function newForwardSecret(): string {
  return `whsec_${randomBytes(32).toString('base64')}`;
}

/** SIDECAR_POSTBACK_FORWARD_SECRET_FILE holding `secret`, with the newline `echo` leaves. */
export async function forwardSecretFile(secret: string): Promise<string> {
  const file = join(scratchDir('forward-secret-'), 'postback-forward-secret');
  await writeFile(file, `${secret}\n`, { mode: 0o600 });
  return file;
}

/** The headers the application got, as an application hands them to its Standard Webhooks library. */
export function plainHeaders(headers: IncomingHttpHeaders): Record<string, string> {
  return Object.fromEntries(
    Object.entries(headers).filter((entry): entry is [string, string] => typeof entry[1] === 'string'),
  );
}

/**
 * What the application does with a postback: verifies it with the standardwebhooks library and its copy of the
 * secret; returns the parsed payload, throws WebhookVerificationError for a forged or altered one.
 */
export function verifyAsApplication(secret: string, received: Received): unknown {
  return new Webhook(secret).verify(received.body.toString('utf8'), plainHeaders(received.headers));
}

export interface SignedPostback {
  readonly headers: Record<string, string>;
  readonly body: string;
  readonly data: string;
  readonly payload: string;
}

let invoice = 0;
/** A payload as the simulator sends it, distinct each time unless `fixed` is given. */
export function payloadJson(fixed?: string): string {
  return JSON.stringify({
    transaction_id: fixed ?? `tx-${process.pid}-${++invoice}`,
    type: 'deposit',
    status: 'SUCCESS',
    amount: '100.50',
    currency: 'USD',
    invoice_no: `inv-secret-${fixed ?? invoice}`,
    user_id: 'user-7',
    completed_at: '2026-11-23T02:00:00Z',
  });
}

/** Signs a postback by the documented scheme; every part can be overridden to forge or break it. */
export async function signPostback(
  privateKeyPem: string,
  options: { payload?: string; url?: string; timestamp?: string; nonce?: string; data?: string } = {},
): Promise<SignedPostback> {
  const payload = options.payload ?? payloadJson();
  const data = options.data ?? Buffer.from(payload, 'utf8').toString('base64');
  const timestamp = options.timestamp ?? String(Math.floor(Date.now() / 1000));
  const nonce = options.nonce ?? newNonce();
  const text = signingString({ method: 'POST', fullUrl: options.url ?? SIGNED_URL, timestamp, nonce, data });
  const signature = await createSigner(parsePrivateKey(privateKeyPem)).sign(text);
  return {
    headers: {
      'content-type': 'application/json',
      'x-timestamp': timestamp,
      'x-nonce': nonce,
      'x-signature': signature,
    },
    body: JSON.stringify({ data }),
    data,
    payload,
  };
}

export interface Delivered {
  readonly status: number;
  readonly code: string | undefined;
  readonly body: Record<string, unknown>;
  readonly headers: Headers;
}

export async function deliver(
  receiverUrl: string,
  postback: { headers: Record<string, string>; body: string },
  options: { path?: string; method?: string } = {},
): Promise<Delivered> {
  const res = await fetch(`${receiverUrl}${options.path ?? PATH}`, {
    method: options.method ?? 'POST',
    headers: postback.headers,
    ...(options.method === 'GET' ? {} : { body: postback.body }),
  });
  const text = await res.text();
  const body = JSON.parse(text) as Record<string, unknown>;
  return {
    status: res.status,
    code: typeof body.code === 'string' ? body.code : undefined,
    body,
    headers: res.headers,
  };
}

export interface ReceiverWorld {
  readonly running: TestSidecar;
  /** The settings it runs with (for an operator command on the same configuration). */
  readonly env: NodeJS.ProcessEnv;
  readonly receiverUrl: string;
  readonly application: ApplicationStub;
  stop(): Promise<void>;
}

/** The real sidecar with its receiver on 127.0.0.1:0 delivering to a fresh ApplicationStub. */
export async function startReceiver(env: NodeJS.ProcessEnv, application?: ApplicationStub): Promise<ReceiverWorld> {
  const internal = application ?? (await new ApplicationStub().start());
  const keys = await makeKeys();
  // No gateway is needed to receive postbacks: the egress side points at a port nothing listens on.
  const full = await sidecarEnv(keys, 'http://127.0.0.1:1', {
    SIDECAR_LOG_LEVEL: 'info',
    SIDECAR_POSTBACK_FORWARD_URL: internal.url,
    SIDECAR_POSTBACK_PUBLIC_URL: PUBLIC_URL,
    SIDECAR_POSTBACK_LISTEN_HOST: '127.0.0.1',
    SIDECAR_POSTBACK_LISTEN_PORT: '0',
    ...env,
  });
  const running = await startTestSidecar(full);
  const receiverUrl = running.sidecar.postbackUrl;
  if (receiverUrl === undefined) throw new Error('the receiver did not start');
  return {
    running,
    env: full,
    receiverUrl,
    application: internal,
    async stop() {
      await running.stop();
      await internal.stop();
    },
  };
}

/** The log lines the receiver wrote, one per postback. */
export function postbackLines(running: TestSidecar): Array<Record<string, unknown>> {
  return running.logs.lines().filter((l) => l.event === 'postback');
}

/** startReceiver, verifying signatures with the public half of `gateway`. */
export async function startSignedReceiver(
  gateway: TestKeys,
  env: NodeJS.ProcessEnv = {},
  application?: ApplicationStub,
): Promise<ReceiverWorld> {
  return startReceiver({ SIDECAR_POSTBACK_PUBLIC_KEY_FILE: await keyFile(gateway.publicKeyPem), ...env }, application);
}

export interface BareReceiver {
  readonly receiver: PostbackReceiver;
  readonly receiverUrl: string;
  readonly application: ApplicationStub;
  readonly store: StateStore;
  readonly metrics: SidecarMetrics;
  /** The large-body pool the receiver was given: the memory budget's postback share for this process. */
  readonly bodyPoolBytes: number;
  /** Closes the receiver (waiting at most `graceMs` for requests in flight), then the store and the application. */
  stop(graceMs: number): Promise<void>;
}

/**
 * The receiver alone, in this process and without the rest of the sidecar, verifying with `gateway`'s public key
 * delivering to a fresh ApplicationStub: for tests that need its store, its metrics or its listener settings.
 */
export async function startBareReceiver(
  gateway: TestKeys,
  options: { store?: StateStore; log?: Logger; listener?: PostbackReceiverDeps['listener'] } = {},
): Promise<BareReceiver> {
  const application = await new ApplicationStub().start();
  const env = await sidecarEnv(await makeKeys(), 'http://127.0.0.1:1', {
    SIDECAR_POSTBACK_FORWARD_URL: application.url,
    SIDECAR_POSTBACK_PUBLIC_URL: PUBLIC_URL,
    SIDECAR_POSTBACK_PUBLIC_KEY_FILE: await keyFile(gateway.publicKeyPem),
    SIDECAR_POSTBACK_LISTEN_HOST: '127.0.0.1',
    SIDECAR_POSTBACK_LISTEN_PORT: '0',
  });
  const store = options.store ?? new MemoryStateStore();
  const metrics = new SidecarMetrics({ version: 't', environment: 'staging', keyFingerprint: 'f' });
  const config = loadConfig(env);
  const bodyPoolBytes = config.memory.postbackBodyPoolBytes;
  const log = options.log ?? createLogger('silent', new CapturedOutput());
  const delivery = await createPostbackDelivery(config.postback!, {
    redis: undefined,
    epoch: undefined,
    metrics: metrics.postbacks,
    inboxMetrics: metrics.inbox,
    log,
  });
  const receiver = createPostbackReceiver(config.postback!, {
    store,
    sink: delivery.sink,
    bodyPoolBytes,
    metrics: metrics.postbacks,
    log,
    ...(options.listener === undefined ? {} : { listener: options.listener }),
  });
  const receiverUrl = await receiver.start();
  return {
    receiver,
    receiverUrl,
    application,
    store,
    metrics,
    bodyPoolBytes,
    async stop(graceMs) {
      await receiver.close(graceMs);
      await delivery.close();
      await store.close();
      await application.stop();
    },
  };
}
