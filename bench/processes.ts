import { spawn, execFileSync, type ChildProcess } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { createInterface } from 'node:readline';
import type { AddressInfo } from 'node:net';

const CLK_TCK = Number(execFileSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).trim()) || 100;

export interface Started {
  readonly child: ChildProcess;
  /** Resolves with the first stdout line that is JSON and passes `pick`. */
  readonly line: Promise<Record<string, unknown>>;
}

/**
 * Spawns a child whose stdout is JSON lines, keeps draining that stdout (a full pipe would block the child's
 * synchronous logger and distort every number), and resolves with the first line `pick` accepts.
 */
export function spawnJsonLines(
  args: readonly string[],
  env: NodeJS.ProcessEnv,
  pick: (line: Record<string, unknown>) => boolean,
  timeoutMs = 15_000,
  launcher: readonly string[] = [],
): Started {
  // A launcher (e.g. valgrind and its options) runs node itself. valgrind runs it in its own process, so the pid
  // is node's; a launcher that forks (strace, say) would leave the pid of the launcher instead.
  const [command, ...rest] = [...launcher, process.execPath, ...args] as [string, ...string[]];
  const child = spawn(command, rest, { env, stdio: ['pipe', 'pipe', 'pipe'] });
  let stderr = '';
  child.stderr?.on('data', (c: Buffer) => (stderr = (stderr + c.toString('utf8')).slice(-4000)));
  const line = new Promise<Record<string, unknown>>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`${args.join(' ')}: no start line in ${timeoutMs} ms\n${stderr}`)), timeoutMs);
    child.once('exit', (code) => reject(new Error(`${args.join(' ')} exited early (${code})\n${stderr}`)));
    const lines = createInterface({ input: child.stdout });
    let found = false;
    lines.on('line', (text) => {
      if (found || !text.startsWith('{')) return;
      const parsed = JSON.parse(text) as Record<string, unknown>;
      if (!pick(parsed)) return;
      found = true;
      clearTimeout(timer);
      resolve(parsed);
    });
  });
  return { child, line };
}

/** Ends a child we started: SIGTERM, then SIGKILL if it has not exited within `graceMs`. */
export async function stop(child: ChildProcess, graceMs = 5_000): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  child.stdin?.end();
  child.kill('SIGTERM');
  const timer = setTimeout(() => child.kill('SIGKILL'), graceMs);
  await exited;
  clearTimeout(timer);
}

/** CPU seconds (user + system, all threads) the process has used so far: /proc/<pid>/stat fields 14 and 15. */
export function cpuSeconds(pid: number): number {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  // The command name in field 2 may contain spaces; everything after its closing parenthesis is fixed-format.
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return (Number(fields[11]) + Number(fields[12])) / CLK_TCK;
}

/** Resident set size in MB: VmRSS of /proc/<pid>/status. */
export function rssMb(pid: number): number {
  const match = /^VmRSS:\s+(\d+) kB/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
  return match ? Number(match[1]) / 1024 : Number.NaN;
}

/**
 * A loopback port that was free a moment ago and has nothing listening now. The bench uses it when the sidecar runs
 * at a level that hides its "start" line (warn); tests use it for Prometheus (which cannot listen on port 0) and
 * for a connection that must be refused. The port is released before it is used: a small race, acceptable there.
 */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as AddressInfo;
      server.close(() => resolve(port));
    });
  });
}
