// A real memory cgroup, as a pod's container gets one: a child of this process's own cgroup with a memory limit and
// no swap, for a test to start a process in (its launcher moves the shell into the cgroup, then execs the program).
// cgroup v1 (this machine's: /sys/fs/cgroup/memory) and v2 (/sys/fs/cgroup with the memory controller). Needs root.
import { existsSync, mkdirSync, readFileSync, rmdirSync, writeFileSync } from 'node:fs';
import { setTimeout as sleep } from 'node:timers/promises';
import { join } from 'node:path';

export interface MemoryCgroup {
  readonly version: 1 | 2;
  readonly path: string;
  /** Prefix to a command: runs it inside the cgroup (`sh -c 'echo $$ > cgroup.procs; exec "$@"'`). */
  readonly launcher: readonly string[];
  /** The most memory the cgroup has held, in bytes (v2 without memory.peak: the current use). */
  peakBytes(): number;
  /** Processes the kernel killed for running out of the cgroup's memory. */
  oomKills(): number;
  /** Kills what is left in it and removes it. */
  remove(): Promise<void>;
}

interface Hierarchy {
  readonly version: 1 | 2;
  /** This process's own cgroup directory for the memory controller. */
  readonly own: string;
}

function hierarchy(): Hierarchy | undefined {
  const lines = readFileSync('/proc/self/cgroup', 'utf8').split('\n');
  const v1 = lines.find((line) => line.split(':')[1]?.split(',').includes('memory'));
  if (v1 !== undefined) {
    const own = join('/sys/fs/cgroup/memory', v1.split(':')[2] ?? '/');
    return existsSync(join(own, 'memory.limit_in_bytes')) ? { version: 1, own } : undefined;
  }
  const v2 = lines.find((line) => line.startsWith('0::'));
  if (v2 === undefined) return undefined;
  const own = join('/sys/fs/cgroup', v2.slice(3));
  const controllers = existsSync(join(own, 'cgroup.controllers'))
    ? readFileSync(join(own, 'cgroup.controllers'), 'utf8')
    : '';
  return controllers.split(/\s+/).includes('memory') ? { version: 2, own } : undefined;
}

/** Why a memory cgroup cannot be made here (not root, no memory controller), or undefined when it can. */
export function memoryCgroupSkipReason(): string | undefined {
  if (process.getuid?.() !== 0) return 'a memory cgroup needs root (CI runs as root)';
  if (hierarchy() === undefined) return 'no cgroup memory controller for this process (v1 memory or v2 memory)';
  return undefined;
}

const read = (file: string): string => readFileSync(file, 'utf8').trim();

/** A field of a `key value` file (memory.events, memory.oom_control). */
function field(file: string, name: string): number {
  if (!existsSync(file)) return 0;
  const line = read(file)
    .split('\n')
    .find((l) => l.startsWith(`${name} `));
  return line === undefined ? 0 : Number(line.split(' ')[1]);
}

export function createMemoryCgroup(name: string, limitBytes: number): MemoryCgroup {
  const found = hierarchy();
  if (found === undefined) throw new Error(memoryCgroupSkipReason());
  const path = join(found.own, `${name}-${process.pid}`);
  // A cgroup is made with mkdir(2); its control files appear with it.
  mkdirSync(path);
  if (found.version === 1) {
    writeFileSync(join(path, 'memory.limit_in_bytes'), String(limitBytes));
    // With swap accounting on, the same limit for memory and swap together: no swapping past the limit.
    if (existsSync(join(path, 'memory.memsw.limit_in_bytes'))) {
      writeFileSync(join(path, 'memory.memsw.limit_in_bytes'), String(limitBytes));
    }
  } else {
    writeFileSync(join(path, 'memory.max'), String(limitBytes));
    if (existsSync(join(path, 'memory.swap.max'))) writeFileSync(join(path, 'memory.swap.max'), '0');
  }
  const procs = join(path, 'cgroup.procs');
  return {
    version: found.version,
    path,
    launcher: ['sh', '-c', 'echo $$ > "$0" && exec "$@"', procs],
    peakBytes: () => {
      if (found.version === 1) return Number(read(join(path, 'memory.max_usage_in_bytes')));
      const peak = join(path, 'memory.peak');
      return Number(read(existsSync(peak) ? peak : join(path, 'memory.current')));
    },
    oomKills: () =>
      found.version === 1
        ? field(join(path, 'memory.oom_control'), 'oom_kill')
        : field(join(path, 'memory.events'), 'oom_kill'),
    remove: async () => {
      for (const pid of existsSync(procs) ? read(procs).split('\n').filter(Boolean) : []) {
        try {
          process.kill(Number(pid), 'SIGKILL');
        } catch {
          // gone already
        }
      }
      // rmdir of a cgroup fails while a process is still in it: the killed ones leave within milliseconds.
      for (let attempt = 0; attempt < 100 && existsSync(path); attempt++) {
        try {
          rmdirSync(path);
        } catch {
          await sleep(20);
        }
      }
    },
  };
}
