// The bench's child processes; CPU time and RSS come from /proc (Linux).
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { createInterface } from 'node:readline';

const CLK_TCK = Number(execFileSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).trim()) || 100;
const running = new Set<ChildProcess>();

export interface Child {
  readonly pid: number;
  readonly url: string;
  alive(): boolean;
  stop(): Promise<void>;
  /** Sends a command to the child's probe (alloc-probe.ts) on stdin; resolves with its answer line, parsed. */
  ask(command: string): Promise<Record<string, unknown>>;
}

/** A child that prints nothing: where it serves, and the URL that answers 200 once it is ready. */
export interface Readiness {
  readonly url: string;
  readonly probe: string;
}

/**
 * Runs `node ...args`; resolves once it is ready, fails after `timeoutMs`. Ready: it printed a JSON line
 * {"url": ...}, or, with `readiness`, its probe answered 200.
 */
export function startNode(
  args: readonly string[],
  env: NodeJS.ProcessEnv,
  timeoutMs = 15_000,
  readiness?: Readiness,
): Promise<Child> {
  const child = spawn(process.execPath, args, { env, stdio: ['pipe', 'pipe', 'pipe'] });
  running.add(child);
  let stderr = '';
  child.stderr.on('data', (chunk: Buffer) => (stderr = (stderr + chunk.toString()).slice(-4000)));
  return new Promise((resolve, reject) => {
    const fail = (why: string): void => {
      clearTimeout(timer);
      void stop(child);
      reject(new Error(`${args.at(-1)}: ${why}\n${stderr}`));
    };
    const timer = setTimeout(() => fail(`not ready within ${timeoutMs} ms`), timeoutMs);
    const onExit = (code: number | null): void => fail(`exited early (${code})`);
    child.once('exit', onExit);
    // The probe answers one command at a time, in order.
    const answers: Array<(answer: Record<string, unknown>) => void> = [];
    const ask = (command: string): Promise<Record<string, unknown>> =>
      new Promise((answered) => {
        if (child.exitCode !== null || child.signalCode !== null) return answered({ error: 'exited' });
        answers.push(answered);
        child.stdin.write(`${command}\n`);
      });
    // A child that is gone answers nothing: whoever waits gets an error instead of waiting for ever.
    child.once('exit', () => answers.splice(0).forEach((answered) => answered({ error: 'exited' })));
    const ready = (url: string): void => {
      clearTimeout(timer);
      child.off('exit', onExit);
      const alive = (): boolean => child.exitCode === null && child.signalCode === null;
      resolve({ pid: child.pid ?? 0, url, alive, stop: () => stop(child), ask });
    };
    // Every line is read, which also keeps the pipe drained: a full pipe would block the child.
    createInterface({ input: child.stdout }).on('line', (line) => {
      if (line.startsWith('{"probe":')) return answers.shift()?.(JSON.parse(line) as Record<string, unknown>);
      const url = /^\{"url":"([^"]+)"\}$/.exec(line)?.[1];
      if (url !== undefined && readiness === undefined) ready(url);
    });
    if (readiness !== undefined) void pollUntilReady(readiness, child).then((ok) => ok && ready(readiness.url));
  });
}

/** Asks the probe every 50 ms while the child lives; true once it answered 200. */
async function pollUntilReady(readiness: Readiness, child: ChildProcess): Promise<boolean> {
  while (child.exitCode === null && child.signalCode === null && running.has(child)) {
    const status = await fetch(readiness.probe).then(
      (answer) => answer.status,
      () => 0,
    );
    if (status === 200) return true;
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  return false;
}

/** SIGTERM, then SIGKILL if the child is still there after `graceMs`. */
async function stop(child: ChildProcess, graceMs = 5_000): Promise<void> {
  running.delete(child);
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise((resolve) => child.once('exit', resolve));
  child.kill('SIGTERM');
  const timer = setTimeout(() => child.kill('SIGKILL'), graceMs);
  await exited;
  clearTimeout(timer);
}

export async function stopAll(): Promise<void> {
  await Promise.all([...running].map((child) => stop(child)));
}

/** The last resort at exit, when there is no time left to wait. */
export function killAllNow(): void {
  for (const child of running) child.kill('SIGKILL');
}

/** CPU seconds (user + system, all threads) used so far: fields 14 and 15 of /proc/<pid>/stat. */
export function cpuSeconds(pid: number): number {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' '); // after the command name, which may hold spaces
  return (Number(fields[11]) + Number(fields[12])) / CLK_TCK;
}

/**
 * Resident set size in MB, of /proc/<pid>/status: all of it (VmRSS), or its anonymous part alone (RssAnon: the
 * process's own memory, without the pages of files it maps, such as the node binary's code, which every node process
 * of the host shares).
 */
export function rssMb(pid: number, part: 'VmRSS' | 'RssAnon' = 'VmRSS'): number {
  const status = readFileSync(`/proc/${pid}/status`, 'utf8');
  return Number(new RegExp(`^${part}:\\s+(\\d+) kB`, 'm').exec(status)?.[1]) / 1024;
}
