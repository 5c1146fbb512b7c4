// What the bench runs, each its own process on 127.0.0.1 port 0: the gateway stand-in, the sidecar and the floor
// proxy (both bundled as the image is: dist/image, dist/bench-image), which share a throwaway 2048-bit key and
// password file in a temp dir.
import { generateKeyPairSync, randomUUID, type KeyObject } from 'node:crypto';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { freeStablePort } from '../test/support/free-port.js';
import { IMAGE_RUNTIME, type Runtime } from '../test/support/image-runtime.js';
import { killAllNow, startNode, type Child } from './processes.js';

const ROOT = fileURLToPath(new URL('..', import.meta.url));
const dist = (...path: string[]): string => join(ROOT, 'dist', ...path);

/** What the image runs (its node flags and environment), read from the Dockerfile: the bench measures those. */
export { IMAGE_RUNTIME, type Runtime };

/** The allocation probe (alloc-probe.ts), in the sidecar and the floor alike: idle until the bench asks. */
const PROBE: readonly string[] = ['--import', pathToFileURL(dist('bench', 'alloc-probe.js')).href];
const [USERNAME, PASSWORD] = ['bench@example.com', 'bench password, loopback only'];
export const ROUTE = '/api/v2/transaction/init';
/** A deposit of spec 2.3's shape: its size sets the cost of base64, hashing and the envelope. */
export const PAYLOAD =
  '{"amount":"125.50","currency":"EUR","gateway":"card","user_id":"user-000123","invoice_no":"INV-2024-000123"}';

/** A request to send; `perRequest`: headers of one request only (a fresh Idempotency-Key each). */
export interface Target {
  readonly url: string;
  readonly headers: Record<string, string>;
  readonly body: string;
  readonly perRequest?: () => Record<string, string>;
}

export interface Workspace {
  readonly dir: string;
  readonly key: KeyObject;
}

/** Removed by run.ts once the sidecar and the floor have read the key and the password. */
export function createWorkspace(): Workspace {
  const dir = mkdtempSync(join(tmpdir(), 'sidecar-bench-'));
  const { privateKey } = generateKeyPairSync('rsa', { modulusLength: 2048 });
  writeFileSync(join(dir, 'key.pem'), privateKey.export({ type: 'pkcs8', format: 'pem' }), { mode: 0o600 });
  writeFileSync(join(dir, 'password'), `${PASSWORD}\n`, { mode: 0o600 });
  return { dir, key: privateKey };
}

export const removeWorkspace = (ws: Workspace): void => rmSync(ws.dir, { recursive: true, force: true });

/**
 * A workspace for a whole bench script: when it exits (done, failed or interrupted), every child is killed and the
 * workspace removed.
 */
export function workspaceUntilExit(): Workspace {
  const ws = createWorkspace();
  process.once('exit', () => {
    killAllNow();
    removeWorkspace(ws);
  });
  return ws;
}

export const startGateway = (): Promise<Child> =>
  startNode([...process.execArgv, join(ROOT, 'bench', 'gateway.ts')], { PATH: process.env.PATH });

/**
 * `redisUrl`: the sidecar keeps its shared state there instead of in memory. `signerEnv`: another signer's settings
 * (the PKCS#11 token of bench/pkcs11.ts). `runtime`: the image's unless another is being compared (flags.ts).
 */
export async function startSidecar(
  ws: Workspace,
  gatewayUrl: string,
  redisUrl?: string,
  signerEnv: NodeJS.ProcessEnv = {},
  runtime: Runtime = IMAGE_RUNTIME,
): Promise<Child> {
  const main = dist('image', 'main.js');
  if (!existsSync(main)) throw new Error('dist/image is missing: run "npm run bench"');
  // The image's own command, `serve`: it prints nothing at the bench's log level, so it gets free ports and is
  // ready once its admin port says it holds a token.
  const [port, adminPort] = [await freeStablePort(), await freeStablePort()];
  const store = redisUrl ? { SIDECAR_STATE_STORE: 'redis', SIDECAR_REDIS_URL: redisUrl } : {};
  const ports = { SIDECAR_LISTEN_PORT: String(port), SIDECAR_ADMIN_PORT: String(adminPort) };
  const env = { ...sidecarEnv(ws, gatewayUrl, runtime), ...ports, ...store, ...signerEnv };
  const readiness = { url: `http://127.0.0.1:${port}`, probe: `http://127.0.0.1:${adminPort}/healthz/token` };
  return startNode([...runtime.flags, ...PROBE, main, 'serve'], env, undefined, readiness);
}

/**
 * bench/floor-proxy.ts, bundled like the sidecar (bundling takes some 7 MB off its RSS at rest; tsx's loader would
 * add some 35 MB).
 */
export function startFloor(ws: Workspace, gatewayUrl: string, runtime: Runtime = IMAGE_RUNTIME): Promise<Child> {
  const floor = dist('bench-image', 'floor-proxy.js');
  if (!existsSync(floor)) throw new Error('dist/bench-image is missing: run "npm run bench"');
  return startNode([...runtime.flags, ...PROBE, floor], sidecarEnv(ws, gatewayUrl, runtime));
}

const sidecarEnv = (ws: Workspace, gatewayUrl: string, runtime: Runtime): NodeJS.ProcessEnv => ({
  PATH: process.env.PATH,
  ...runtime.env,
  SIDECAR_BASE_URL: gatewayUrl,
  SIDECAR_ENVIRONMENT: 'staging',
  SIDECAR_USERNAME: USERNAME,
  SIDECAR_PASSWORD_FILE: join(ws.dir, 'password'),
  SIDECAR_PRIVATE_KEY_FILE: join(ws.dir, 'key.pem'),
  SIDECAR_LISTEN_HOST: '127.0.0.1',
  SIDECAR_ADMIN_HOST: '127.0.0.1',
  SIDECAR_LOG_LEVEL: 'warn',
  SIDECAR_SHUTDOWN_DRAIN_DELAY_MS: '0',
});

/** What an internal service sends the sidecar: the plain payload; with `idempotent`, a fresh Idempotency-Key each. */
export const sidecarTarget = (url: string, idempotent = false): Target => ({
  url,
  headers: { 'content-type': 'application/json' },
  body: PAYLOAD,
  ...(idempotent ? { perRequest: () => ({ 'idempotency-key': randomUUID() }) } : {}),
});

/**
 * The request as the sidecar sends it, straight to the gateway: a real token, signing headers of the real size
 * (the stand-in checks presence only; 344 is base64 of 256 bytes) and the envelope.
 */
export async function directTarget(gatewayUrl: string): Promise<Target> {
  const grant = { grant_type: 'password', username: USERNAME, password: PASSWORD };
  const login = await fetch(`${gatewayUrl}/api/v2/auth/token`, { method: 'POST', body: JSON.stringify(grant) });
  const { access_token: token } = (await login.json()) as { access_token: string };
  const headers = {
    'content-type': 'application/json',
    authorization: `Bearer ${token}`,
    'x-timestamp': String(Math.floor(Date.now() / 1000)),
    'x-nonce': '0123456789abcdef0123456789abcdef',
    'x-signature': 'A'.repeat(344),
  };
  return { url: gatewayUrl, headers, body: JSON.stringify({ data: Buffer.from(PAYLOAD).toString('base64') }) };
}
