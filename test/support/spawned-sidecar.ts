// The sidecar as operators run it: `node --import tsx src/main.ts serve` in its own process, configured only by
// environment variables, its addresses read from the JSON "start" log line on stdout.
import { spawn, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';

const REPO_ROOT = fileURLToPath(new URL('../../', import.meta.url));

export interface SpawnedSidecar {
  readonly child: ChildProcess;
  readonly proxyUrl: string;
  readonly adminUrl: string;
  /** The postback receiver's address, when it is on. */
  readonly postbackUrl: string | undefined;
  /** Everything written so far to stdout and stderr. */
  output(): { stdout: string; stderr: string };
  /** Resolves with the exit code (null when killed by a signal) and the signal. */
  readonly exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  /** Kills the process if it still runs (for finally blocks). */
  kill(): Promise<void>;
}

export interface SpawnOptions {
  /** What runs the sidecar: `--import tsx src/main.ts` by default; a built `dist/src/main.js` to run it as shipped. */
  readonly program?: readonly string[];
  /** A command the node command is handed to (one that puts it in a memory cgroup, say). */
  readonly launcher?: readonly string[];
}

/** `nodeArgs`: flags for node itself, before the script (the image's heap settings, say). */
export async function spawnSidecar(
  env: NodeJS.ProcessEnv,
  startMs = 15_000,
  nodeArgs: readonly string[] = [],
  options: SpawnOptions = {},
): Promise<SpawnedSidecar> {
  const program = options.program ?? ['--import', 'tsx', 'src/main.ts'];
  const [command = process.execPath, ...launcherArgs] = [...(options.launcher ?? []), process.execPath];
  // Only PATH and HOME from the test's own environment: stray SIDECAR_* variables must not leak in.
  const child = spawn(command, [...launcherArgs, ...nodeArgs, ...program, 'serve'], {
    cwd: REPO_ROOT,
    env: { PATH: process.env.PATH, HOME: process.env.HOME, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (c: Buffer) => (stdout += c.toString('utf8')));
  child.stderr.on('data', (c: Buffer) => (stderr += c.toString('utf8')));
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
    child.once('exit', (code, signal) => resolve({ code, signal })),
  );
  const kill = async (): Promise<void> => {
    if (child.exitCode !== null || child.signalCode !== null) return;
    child.kill('SIGKILL');
    await exited;
  };
  const deadline = Date.now() + startMs;
  for (;;) {
    const start = stdout
      .split('\n')
      .map(parseLine)
      .find((l) => l?.event === 'start');
    if (start && typeof start.proxyUrl === 'string' && typeof start.adminUrl === 'string') {
      return {
        child,
        proxyUrl: start.proxyUrl,
        adminUrl: start.adminUrl,
        postbackUrl: typeof start.postbackUrl === 'string' ? start.postbackUrl : undefined,
        output: () => ({ stdout, stderr }),
        exited,
        kill,
      };
    }
    if (child.exitCode !== null || Date.now() > deadline) {
      await kill();
      throw new Error(`sidecar did not log "start" (exit ${String(child.exitCode)}):\n${stdout}\n${stderr}`);
    }
    await new Promise((resolve) => setTimeout(resolve, 25));
  }
}

function parseLine(line: string): Record<string, unknown> | undefined {
  try {
    const value: unknown = JSON.parse(line);
    return typeof value === 'object' && value !== null ? (value as Record<string, unknown>) : undefined;
  } catch {
    return undefined;
  }
}
