import { rmSync } from 'node:fs';
import { removeWorkspace, type RunningProcess, type Workspace } from './stack.js';

/**
 * What a bench run has started or written: processes, the workspace (a throwaway key and password file) and
 * scratch directories. cleanup() ends and removes all of it, on success, on failure and on Ctrl-C, so a run
 * leaves nothing behind.
 */
export class Teardown {
  private readonly running = new Set<RunningProcess>();
  private readonly dirs = new Set<string>();
  private workspace: Workspace | undefined;

  /** SIGINT and SIGTERM clean up, then exit 130. */
  onSignals(): this {
    for (const signal of ['SIGINT', 'SIGTERM'] as const) process.once(signal, () => void this.cleanup().finally(() => process.exit(130)));
    return this;
  }

  async track<T extends RunningProcess>(started: Promise<T>): Promise<T> {
    const proc = await started;
    this.running.add(proc);
    return proc;
  }

  /** Stops a tracked process now, before the end of the run. */
  async stop(proc: RunningProcess): Promise<void> {
    await proc.stop();
    this.running.delete(proc);
  }

  keepWorkspace(ws: Workspace): Workspace {
    this.workspace = ws;
    return ws;
  }

  keepDir(dir: string): string {
    this.dirs.add(dir);
    return dir;
  }

  removeDir(dir: string): void {
    rmSync(dir, { recursive: true, force: true });
    this.dirs.delete(dir);
  }

  async cleanup(): Promise<void> {
    await Promise.allSettled([...this.running].map((p) => p.stop()));
    this.running.clear();
    for (const dir of [...this.dirs]) this.removeDir(dir);
    if (this.workspace) await removeWorkspace(this.workspace);
    this.workspace = undefined;
  }

  /** The last resort when cleanup itself failed: at least the key and password file go. */
  removeWorkspaceNow(): void {
    if (this.workspace) rmSync(this.workspace.dir, { recursive: true, force: true });
  }
}
