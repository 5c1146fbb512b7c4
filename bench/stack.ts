// What the bench runs, each its own process on 127.0.0.1 port 0: the gateway stand-in, the sidecar (the built
// dist/) and the floor proxy; the last two share a throwaway 2048-bit key and password file in a temp dir.
import { generateKeyPairSync, randomUUID, type KeyObject } from 'node:crypto';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { startNode, type Child } from './processes.js';

const ROOT = fileURLToPath(new URL('..', import.meta.url));
const DIST = join(ROOT, 'dist', 'src');
/** As in the image's ENTRYPOINT and `npm start`. */
export const SHIPPED_FLAGS: readonly string[] = ['--max-semi-space-size=4', '--max-old-space-size=192'];
const USERNAME = 'bench@example.com';
const PASSWORD = 'bench password, loopback only';

export const ROUTE = '/api/v2/transaction/init';
/** A deposit of spec 2.3's shape: its size sets the cost of base64, hashing and the envelope. */
export const PAYLOAD = JSON.stringify({
  amount: '125.50',
  currency: 'EUR',
  gateway: 'card',
  user_id: 'user-000123',
  invoice_no: 'INV-2024-000123',
});

/** A request to send, to the sidecar or straight to the gateway. */
export interface Target {
  readonly url: string;
  readonly headers: Record<string, string>;
  readonly body: string;
  /** Headers of one request only (a fresh Idempotency-Key each), merged over `headers`. */
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

export function removeWorkspace(ws: Workspace): void {
  rmSync(ws.dir, { recursive: true, force: true });
}

export function startGateway(): Promise<Child> {
  return startNode([...process.execArgv, join(ROOT, 'bench', 'gateway.ts')], { PATH: process.env.PATH });
}

// What `signing-sidecar serve` does (config from the environment, then start), through the built package's own
// API, so that the sidecar listens on port 0 and says where at any log level. It answers once it holds a token.
const SIDECAR_PROGRAM = `
const { loadConfig } = await import(${JSON.stringify(pathToFileURL(join(DIST, 'config', 'load.js')).href)});
const { startSidecar } = await import(${JSON.stringify(pathToFileURL(join(DIST, 'app.js')).href)});
const sidecar = await startSidecar(loadConfig(process.env));
process.once('SIGTERM', () => void sidecar.shutdown('SIGTERM').finally(() => process.exit(0)));
process.stdin.once('end', () => process.exit(1)).resume();
while (!sidecar.tokens.hasValidToken()) await new Promise((resolve) => setTimeout(resolve, 20));
console.log(JSON.stringify({ url: sidecar.proxyUrl }));`;

/**
 * `redisUrl`: the sidecar keeps its shared state there (SIDECAR_STATE_STORE=redis) instead of in memory.
 * `flags`: node's flags, the shipped ones unless told (to compare heap settings).
 */
export function startSidecar(
  ws: Workspace,
  gatewayUrl: string,
  { redisUrl, flags = SHIPPED_FLAGS }: { redisUrl?: string | undefined; flags?: readonly string[] } = {},
): Promise<Child> {
  if (!existsSync(join(DIST, 'app.js'))) throw new Error('dist/ is missing: run "npm run build" first');
  const store = redisUrl ? { SIDECAR_STATE_STORE: 'redis', SIDECAR_REDIS_URL: redisUrl } : {};
  return startNode([...flags, '--input-type=module', '--eval', SIDECAR_PROGRAM], {
    ...sidecarEnv(ws, gatewayUrl),
    ...store,
  });
}

/**
 * bench/floor-proxy.ts, with the sidecar's settings and node flags, built like the sidecar (tsx's loader alone
 * would add some 35 MB to its RSS).
 */
export function startFloor(ws: Workspace, gatewayUrl: string, flags = SHIPPED_FLAGS): Promise<Child> {
  const built = join(ROOT, 'dist', 'bench', 'floor-proxy.js');
  if (!existsSync(built)) throw new Error('dist/bench is missing: run "npm run bench", which builds it');
  return startNode([...flags, built], sidecarEnv(ws, gatewayUrl));
}

function sidecarEnv(ws: Workspace, gatewayUrl: string): NodeJS.ProcessEnv {
  return {
    PATH: process.env.PATH,
    SIDECAR_BASE_URL: gatewayUrl,
    SIDECAR_ENVIRONMENT: 'staging',
    SIDECAR_USERNAME: USERNAME,
    SIDECAR_PASSWORD_FILE: join(ws.dir, 'password'),
    SIDECAR_PRIVATE_KEY_FILE: join(ws.dir, 'key.pem'),
    SIDECAR_LISTEN_HOST: '127.0.0.1',
    SIDECAR_LISTEN_PORT: '0',
    SIDECAR_ADMIN_HOST: '127.0.0.1',
    SIDECAR_ADMIN_PORT: '0',
    SIDECAR_LOG_LEVEL: 'warn',
    SIDECAR_SHUTDOWN_DRAIN_DELAY_MS: '0',
  };
}

/** What an internal service sends the sidecar: the plain payload; with `idempotent`, a fresh Idempotency-Key each. */
export const sidecarTarget = (url: string, idempotent = false): Target => ({
  url,
  headers: { 'content-type': 'application/json' },
  body: PAYLOAD,
  ...(idempotent ? { perRequest: () => ({ 'idempotency-key': randomUUID() }) } : {}),
});

/**
 * The request as the sidecar sends it, straight to the gateway: a real token, signing headers of the real size
 * (the stand-in checks presence only) and the envelope. So the latency baseline differs by the sidecar alone.
 */
export async function directTarget(gatewayUrl: string): Promise<Target> {
  const login = await fetch(`${gatewayUrl}/api/v2/auth/token`, {
    method: 'POST',
    body: JSON.stringify({ grant_type: 'password', username: USERNAME, password: PASSWORD }),
    signal: AbortSignal.timeout(5_000),
  });
  const { access_token: token } = (await login.json()) as { access_token: string };
  const headers = {
    'content-type': 'application/json',
    authorization: `Bearer ${token}`,
    'x-timestamp': String(Math.floor(Date.now() / 1000)),
  };
  const signing = { 'x-nonce': '0123456789abcdef0123456789abcdef', 'x-signature': 'A'.repeat(344) }; // 344: base64 of 256 bytes
  return {
    url: gatewayUrl,
    headers: { ...headers, ...signing },
    body: JSON.stringify({ data: Buffer.from(PAYLOAD).toString('base64') }),
  };
}
