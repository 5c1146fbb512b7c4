// `npm run demo`: the whole request path on this machine, sidecar and simulator, then cleans up.
import { generateKeyPair, randomBytes } from 'node:crypto';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { createServer, type IncomingMessage, type Server } from 'node:http';
import { createServer as createTcpServer, type AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { Webhook, WebhookVerificationError } from 'standardwebhooks';
import { startSidecar, type RunningSidecar } from '../src/app.js';
import { loadConfig } from '../src/config/load.js';
import { startSimulator, type RunningSimulator } from '@signing-sidecar/simulator';
import { parseCommandLine } from '../src/tools/usage.js';
import { EXIT, type Command, type ExitCode } from '../src/tools/command.js';

const USAGE = `Usage: npm run demo [-- --keep]

Runs the whole request path on this machine and cleans up: makes a throwaway key pair, starts the gateway
simulator (HTTPS, self-made CA) and the sidecar, sends a plain-JSON deposit and withdrawal through the sidecar
as a caller would, completes the deposit and follows its signed postback: simulator -> the sidecar's
postback receiver (verifies it) -> a small application that checks the sidecar's Standard Webhooks signature,
as an application should, and prints the plain JSON. Exits 0 on success.

It prints the deposit's payment page (transaction_link) and the simulator's dashboard. With --keep it then
makes one more deposit and keeps running until Ctrl-C, so you can open that payment page in a browser, press
"Pay" or "Decline", and watch the postback arrive here and on the dashboard.
`;

const USERNAME = 'demo-vendor@example.com';
const POSTBACK_WAIT_MS = 15_000;
/** --keep waits for postbacks in rounds this long, so a stop signal is never queued behind a wait. */
const KEEP_POLL_MS = 60_000;

interface Postback {
  readonly payload: Record<string, unknown>;
  /** X-Postback-Verified as the receiver set it. */
  readonly verified: string;
  /** webhook-id, when the sidecar's signature verified with the demo's forward secret; undefined: it did not. */
  readonly webhookId: string | undefined;
}

const demo: Command = async (argv, io) => {
  const flags = parseCommandLine(argv, { keep: { type: 'boolean' } }, io, { usage: USAGE, help: USAGE });
  if (typeof flags === 'number') return flags;
  const say = (line: string) => io.stdout.write(`${line}\n`);
  const dir = await mkdtemp(join(tmpdir(), 'signing-sidecar-demo-'));
  const cleanup: Array<() => Promise<void>> = [() => rm(dir, { recursive: true, force: true })];
  try {
    return await run(dir, say, cleanup, flags.keep === true ? io.stopSignal : undefined);
  } finally {
    for (const step of cleanup.reverse()) await step().catch(() => undefined);
  }
};

async function run(
  dir: string,
  say: (line: string) => void,
  cleanup: Array<() => Promise<void>>,
  keepUntil: Promise<NodeJS.Signals> | undefined,
): Promise<ExitCode> {
  say('1. making a throwaway RSA-2048 key pair');
  const keys = await makeKeyPair(dir);
  // The secret the sidecar signs its postbacks with and the application verifies them with (docs/postbacks.md).
  const forwardSecret = `whsec_${randomBytes(32).toString('base64')}`;
  const application = await startApplication(forwardSecret);
  cleanup.push(() => closeServer(application.server));
  // The URL registered with the gateway is the receiver's; it must be known before the simulator starts. The port is
  // held until the sidecar takes it, so that nothing started meanwhile (the simulator) is given it.
  const receiverPort = await reservePort();
  cleanup.push(() => receiverPort.release());
  const receiverUrl = `http://127.0.0.1:${receiverPort.port}/gateway/postbacks`;
  say('2. starting the gateway simulator (HTTPS, signed postbacks on)');
  const sim = await startSimulator({
    tls: true,
    accounts: [
      {
        username: USERNAME,
        password: keys.password,
        publicKeyPem: keys.publicKeyPem,
        webhookUrl: receiverUrl,
        signedPostbacks: true,
      },
    ],
  });
  cleanup.push(() => sim.close());
  await receiverPort.release();
  const sidecar = await startDemoSidecar(dir, sim, { receiverUrl, forwardUrl: application.url, forwardSecret });
  cleanup.push(() => sidecar.shutdown('demo finished'));
  say(`3. sidecar ${sidecar.egressUrl} -> gateway ${sim.baseUrl}, token obtained; postbacks on ${receiverUrl}`);

  const deposit = await postJson(sidecar, '/api/v2/transaction/init', {
    amount: '100.50',
    currency: 'USD',
    gateway: 'card',
    user_id: 'u1',
    invoice_no: `inv-${Date.now()}`,
  });
  say(`4. deposit:    HTTP ${deposit.status} ${JSON.stringify(deposit.body)}`);
  const withdrawal = await postJson(sidecar, '/api/v2/transfer-out/init', {
    amount: '25.00',
    currency: 'USD',
    user_id: 'u1',
    invoice_no: `out-${Date.now()}`,
  });
  say(`5. withdrawal: HTTP ${withdrawal.status} ${JSON.stringify(withdrawal.body)}`);
  const link = deposit.body.transaction_link;
  const id = deposit.body.transaction_id;
  if (deposit.status >= 300 || typeof link !== 'string' || typeof id !== 'string' || withdrawal.status >= 300) {
    say('demo failed: the gateway did not accept the requests');
    return EXIT.failed;
  }
  say(`   customer would be redirected to: ${link}`);
  say('   that payment page completes it too: "Pay" or "Decline" in a browser (try it: npm run demo -- --keep)');
  say(`   dashboard (loopback only; requests and their verdicts, transactions, postbacks): ${dashboardUrl(sim)}`);
  await sim.complete(id, 'SUCCESS');
  say(`6. completed ${id} as SUCCESS; postback: simulator -> sidecar receiver (verifies) -> application`);
  const postback = await application.next(POSTBACK_WAIT_MS);
  say(`7. application: ${describe(postback)}: ${JSON.stringify(postback.payload)}`);
  if (postback.webhookId === undefined || postback.verified !== 'signature' || postback.payload.status !== 'SUCCESS') {
    return EXIT.failed;
  }
  if (keepUntil !== undefined) await keepRunning(sidecar, sim, application, say, keepUntil);
  say('demo complete: cleaning up');
  return EXIT.ok;
}

function describe(postback: Postback): string {
  const signed =
    postback.webhookId === undefined ? 'signature REFUSED' : `signature verified (webhook-id ${postback.webhookId})`;
  return `${signed}, X-Postback-Verified: ${postback.verified}`;
}

function dashboardUrl(sim: RunningSimulator): string {
  return `${sim.listenUrl}/_sim/`;
}

/** --keep: one more deposit to complete in a browser; prints each postback until the demo is stopped. */
async function keepRunning(
  sidecar: RunningSidecar,
  sim: RunningSimulator,
  application: DemoApplication,
  say: (line: string) => void,
  stop: Promise<NodeJS.Signals>,
): Promise<void> {
  const deposit = await postJson(sidecar, '/api/v2/transaction/init', {
    amount: '42.00',
    currency: 'EUR',
    gateway: 'card',
    user_id: 'u1',
    invoice_no: `inv-browser-${Date.now()}`,
  });
  say(`8. another deposit waits for you: open ${String(deposit.body.transaction_link)}`);
  say(
    '   and press "Pay" or "Decline" (the simulator\'s certificate is from the demo\'s throwaway CA: accept the warning)',
  );
  say(`   dashboard: ${dashboardUrl(sim)}`);
  say('   postbacks that reach the application are printed here; Ctrl-C ends the demo');
  let stopped = false;
  const stopping = stop.then(() => {
    stopped = true;
  });
  while (!stopped) {
    const next = await Promise.race([application.next(KEEP_POLL_MS).catch(() => undefined), stopping]);
    if (next !== undefined) say(`   application: ${describe(next)}: ${JSON.stringify(next.payload)}`);
  }
}

async function makeKeyPair(dir: string) {
  const { privateKey, publicKey } = await promisify(generateKeyPair)('rsa', {
    modulusLength: 2048,
    publicKeyEncoding: { type: 'spki', format: 'pem' },
    privateKeyEncoding: { type: 'pkcs8', format: 'pem' },
  });
  await writeFile(join(dir, 'private-key.pem'), privateKey, { mode: 0o600 });
  const password = `demo-${Math.random().toString(36).slice(2)}`;
  await writeFile(join(dir, 'password'), password, { mode: 0o600 });
  return { publicKeyPem: publicKey, password };
}

async function startDemoSidecar(
  dir: string,
  sim: RunningSimulator,
  postbacks: { receiverUrl: string; forwardUrl: string; forwardSecret: string },
): Promise<RunningSidecar> {
  const caFile = join(dir, 'gateway-ca.pem');
  await writeFile(caFile, sim.caPem ?? '');
  const postbackKeyFile = join(dir, 'gateway-postback.pub.pem');
  await writeFile(postbackKeyFile, sim.postbackPublicKeyPem);
  const forwardSecretFile = join(dir, 'postback-forward-secret');
  await writeFile(forwardSecretFile, `${postbacks.forwardSecret}\n`, { mode: 0o600 });
  const config = loadConfig({
    SIDECAR_BASE_URL: sim.baseUrl,
    SIDECAR_ENVIRONMENT: 'staging',
    SIDECAR_USERNAME: USERNAME,
    SIDECAR_PASSWORD_FILE: join(dir, 'password'),
    SIDECAR_PRIVATE_KEY_FILE: join(dir, 'private-key.pem'),
    SIDECAR_UPSTREAM_CA_FILE: caFile,
    SIDECAR_LISTEN_PORT: '0',
    SIDECAR_ADMIN_HOST: '127.0.0.1',
    SIDECAR_ADMIN_PORT: '0',
    SIDECAR_SHUTDOWN_DRAIN_DELAY_MS: '0',
    SIDECAR_POSTBACK_FORWARD_URL: postbacks.forwardUrl,
    SIDECAR_POSTBACK_PUBLIC_URL: postbacks.receiverUrl,
    SIDECAR_POSTBACK_PUBLIC_KEY_FILE: postbackKeyFile,
    SIDECAR_POSTBACK_FORWARD_SECRET_FILE: forwardSecretFile,
    SIDECAR_POSTBACK_LISTEN_HOST: '127.0.0.1',
    SIDECAR_POSTBACK_LISTEN_PORT: new URL(postbacks.receiverUrl).port,
    SIDECAR_LOG_LEVEL: 'silent',
  });
  const sidecar = await startSidecar(config);
  const until = Date.now() + 10_000;
  while (!sidecar.tokens.hasValidToken()) {
    if (Date.now() > until) throw new Error('the sidecar obtained no token from the simulator');
    await new Promise((r) => setTimeout(r, 20));
  }
  return sidecar;
}

async function postJson(sidecar: RunningSidecar, path: string, payload: Record<string, string>) {
  const response = await fetch(`${sidecar.egressUrl}${path}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(payload),
  });
  return { status: response.status, body: (await response.json()) as Record<string, unknown> };
}

interface DemoApplication {
  readonly server: Server;
  readonly url: string;
  next(timeoutMs: number): Promise<Postback>;
}

/**
 * The application: receives the plain JSON from the sidecar's receiver and verifies the sidecar's
 * signature with the standardwebhooks library, as an application should; 200 when it verifies, else 401.
 */
async function startApplication(forwardSecret: string): Promise<DemoApplication> {
  const verifier = new Webhook(forwardSecret);
  // Deliveries that arrive before anyone waits are kept, so a fast postback is never lost.
  const received: Postback[] = [];
  const waiting: Array<(postback: Postback) => void> = [];
  const server = createServer((req, res) => {
    let body = '';
    req.setEncoding('utf8');
    req.on('data', (chunk: string) => (body += chunk));
    req.on('end', () => {
      const postback = readPostback(verifier, req.headers, body);
      res.writeHead(postback.webhookId === undefined ? 401 : 200).end();
      const waiter = waiting.shift();
      if (waiter) waiter(postback);
      else received.push(postback);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/internal/postbacks`;
  const next = (timeoutMs: number) =>
    new Promise<Postback>((resolve, reject) => {
      const early = received.shift();
      if (early) return resolve(early);
      const waiter = (postback: Postback) => {
        clearTimeout(timer);
        resolve(postback);
      };
      // A waiter that timed out leaves the queue, so the next delivery goes to whoever waits then.
      const timer = setTimeout(() => {
        waiting.splice(waiting.indexOf(waiter), 1);
        reject(new Error('no postback arrived in time'));
      }, timeoutMs);
      // --keep may stop while a wait is pending: the wait must not hold the finished demo open.
      timer.unref();
      waiting.push(waiter);
    });
  return { server, url, next };
}

function readPostback(verifier: Webhook, headers: IncomingMessage['headers'], body: string): Postback {
  const plain = Object.fromEntries(
    Object.entries(headers).filter((entry): entry is [string, string] => typeof entry[1] === 'string'),
  );
  let webhookId: string | undefined;
  try {
    verifier.verify(body, plain);
    webhookId = plain['webhook-id'];
  } catch (err) {
    if (!(err instanceof WebhookVerificationError)) throw err;
  }
  return {
    payload: JSON.parse(body) as Record<string, unknown>,
    verified: String(headers['x-postback-verified']),
    webhookId,
  };
}

/** A free port, held by a listener of its own until release() (which may be called more than once). */
function reservePort(): Promise<{ readonly port: number; release(): Promise<void> }> {
  return new Promise((resolve, reject) => {
    const holder = createTcpServer();
    holder.once('error', reject);
    holder.listen(0, '127.0.0.1', () => {
      const { port } = holder.address() as AddressInfo;
      const release = (): Promise<void> =>
        holder.listening ? new Promise((done) => holder.close(() => done())) : Promise.resolve();
      resolve({ port, release });
    });
  });
}

function closeServer(server: Server): Promise<void> {
  server.closeAllConnections();
  return new Promise((resolve) => server.close(() => resolve()));
}

// `npm run demo`: a development tool beside the sidecar, never part of its image.
process.exitCode = await demo(process.argv.slice(2), {
  stdout: process.stdout,
  stderr: process.stderr,
  env: process.env,
  stopSignal: new Promise<NodeJS.Signals>((resolve) => process.once('SIGINT', () => resolve('SIGINT'))),
});
