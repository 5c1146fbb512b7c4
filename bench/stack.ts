import { generateKeyPairSync, type KeyObject } from 'node:crypto';
import { existsSync } from 'node:fs';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { BENCH_PASSWORD, BENCH_USERNAME } from './gateway.js';
import { freePort, spawnJsonLines, stop, type Started } from './processes.js';

const ROOT = fileURLToPath(new URL('..', import.meta.url));
// BENCH_SIDECAR_ENTRY lets an A/B comparison point at another build of the same tree.
export const SIDECAR_ENTRY = process.env.BENCH_SIDECAR_ENTRY ?? join(ROOT, 'dist', 'src', 'main.js');
const GATEWAY_ENTRY = join(ROOT, 'bench', 'gateway-main.ts');
const FLOOR_ENTRY = join(ROOT, 'bench', 'floor-proxy.ts');

export interface Workspace {
  readonly dir: string;
  readonly privateKey: KeyObject;
  readonly keyFile: string;
  readonly passwordFile: string;
}

/** A throwaway 2048-bit key and password file in a fresh temp dir (removed by `removeWorkspace`). */
export async function createWorkspace(): Promise<Workspace> {
  const dir = await mkdtemp(join(tmpdir(), 'sidecar-bench-'));
  const { privateKey } = generateKeyPairSync('rsa', { modulusLength: 2048 });
  const keyFile = join(dir, 'key.pem');
  const passwordFile = join(dir, 'password');
  await writeFile(keyFile, privateKey.export({ type: 'pkcs8', format: 'pem' }), { mode: 0o600 });
  await writeFile(passwordFile, `${BENCH_PASSWORD}\n`, { mode: 0o600 });
  return { dir, privateKey, keyFile, passwordFile };
}

export function removeWorkspace(ws: Workspace): Promise<void> {
  return rm(ws.dir, { recursive: true, force: true });
}

export interface RunningProcess {
  readonly pid: number;
  readonly url: string;
  stop(): Promise<void>;
}

export async function startGateway(): Promise<RunningProcess> {
  return ready(spawnJsonLines([...process.execArgv, GATEWAY_ENTRY], process.env, (l) => typeof l.url === 'string'), 'url');
}

export interface SidecarOptions {
  readonly gatewayUrl: string;
  readonly logLevel: string;
  /** Extra node flags, e.g. --cpu-prof (profiles are written on a clean SIGTERM exit). */
  readonly nodeFlags?: readonly string[];
  /** Another program that speaks the sidecar's start protocol (the floor proxy); default: the sidecar. */
  readonly entry?: string;
  /** A command that runs node, e.g. valgrind with its options (bench/instructions.ts). */
  readonly launcher?: readonly string[];
  /** How long starting may take, up to /readyz answering (default 15 s; much longer under valgrind). */
  readonly startTimeoutMs?: number;
}

/** `node dist/src/main.js serve` as its own process, so its CPU time and RSS can be read from /proc. */
export async function startSidecar(ws: Workspace, options: SidecarOptions): Promise<RunningProcess & { adminUrl: string }> {
  const entry = options.entry ?? SIDECAR_ENTRY;
  if (!existsSync(entry)) throw new Error(`${entry} is missing: run "npx tsc -p tsconfig.build.json" first`);
  // At warn and above the "start" line (info) is not printed, so the ports are chosen here instead.
  const quiet = ['warn', 'error', 'fatal', 'silent'].includes(options.logLevel);
  const [listenPort, adminPort] = quiet ? [await freePort(), await freePort()] : [0, 0];
  const env: NodeJS.ProcessEnv = {
    PATH: process.env.PATH,
    SIDECAR_BASE_URL: options.gatewayUrl,
    SIDECAR_ENVIRONMENT: 'staging',
    SIDECAR_USERNAME: BENCH_USERNAME,
    SIDECAR_PASSWORD_FILE: ws.passwordFile,
    SIDECAR_PRIVATE_KEY_FILE: ws.keyFile,
    SIDECAR_LISTEN_HOST: '127.0.0.1',
    SIDECAR_LISTEN_PORT: String(listenPort),
    SIDECAR_ADMIN_HOST: '127.0.0.1',
    SIDECAR_ADMIN_PORT: String(adminPort),
    SIDECAR_SHUTDOWN_DRAIN_DELAY_MS: '0',
    SIDECAR_SHUTDOWN_MAX_DELAY_MS: '2000',
    SIDECAR_LOG_LEVEL: options.logLevel,
    // libuv's pool runs the signatures; its size is a deployment knob worth comparing, so it is passed through.
    ...(process.env.UV_THREADPOOL_SIZE ? { UV_THREADPOOL_SIZE: process.env.UV_THREADPOOL_SIZE } : {}),
    // For profiling with perf (e.g. "--perf-basic-prof"); unset in normal runs.
    ...(process.env.BENCH_SIDECAR_NODE_OPTIONS ? { NODE_OPTIONS: process.env.BENCH_SIDECAR_NODE_OPTIONS } : {}),
  };
  const args = [...(options.nodeFlags ?? []), entry, 'serve'];
  const startTimeoutMs = options.startTimeoutMs ?? 15_000;
  let started: Started;
  if (quiet) {
    started = spawnJsonLines(args, env, () => false, startTimeoutMs, options.launcher);
    const adminUrl = `http://127.0.0.1:${adminPort}`;
    const proc = { pid: started.child.pid ?? 0, url: `http://127.0.0.1:${listenPort}`, adminUrl, stop: () => stop(started.child) };
    started.line.catch(() => undefined); // never resolves by design; an early exit is caught by waitReady
    await waitReady(adminUrl, started, startTimeoutMs);
    return proc;
  }
  started = spawnJsonLines(args, env, (l) => l.event === 'start', startTimeoutMs, options.launcher);
  const line = await started.line.catch(async (err: unknown) => {
    await stop(started.child);
    throw err;
  });
  const proc = { pid: started.child.pid ?? 0, url: String(line.proxyUrl), adminUrl: String(line.adminUrl), stop: () => stop(started.child) };
  await waitReady(proc.adminUrl, started, startTimeoutMs);
  return proc;
}

/** The floor proxy (bench/floor-proxy.ts), started like the sidecar with the same node flags. */
export function startFloorProxy(
  ws: Workspace,
  gatewayUrl: string,
  nodeFlags: readonly string[],
  launch: Pick<SidecarOptions, 'launcher' | 'startTimeoutMs'> = {},
): Promise<RunningProcess & { adminUrl: string }> {
  return startSidecar(ws, { gatewayUrl, logLevel: 'info', nodeFlags: [...process.execArgv, ...nodeFlags], entry: FLOOR_ENTRY, ...launch });
}

/** Waits for /readyz (a token is held), so no measured request pays for the first login. */
async function waitReady(adminUrl: string, started: Started, ms = 15_000): Promise<void> {
  const until = Date.now() + ms;
  while (Date.now() < until) {
    if (started.child.exitCode !== null) break;
    const ok = await fetch(`${adminUrl}/readyz`).then((r) => r.ok, () => false);
    if (ok) return;
    await new Promise((r) => setTimeout(r, 50));
  }
  await stop(started.child);
  throw new Error('sidecar did not become ready');
}

async function ready(started: Started, field: string): Promise<RunningProcess> {
  const line = await started.line.catch(async (err: unknown) => {
    await stop(started.child);
    throw err;
  });
  return { pid: started.child.pid ?? 0, url: String(line[field]), stop: () => stop(started.child) };
}
