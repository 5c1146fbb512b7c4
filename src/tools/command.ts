import type { Writable } from 'node:stream';

/** What a subcommand may touch: injected so tests capture output and pass their own environment. */
export interface CommandIo {
  readonly stdout: Writable;
  readonly stderr: Writable;
  readonly env: NodeJS.ProcessEnv;
  /** Resolves when the process is asked to stop (SIGTERM/SIGINT); long-running commands await it. */
  readonly stopSignal: Promise<NodeJS.Signals>;
  /** Registers what SIGHUP does (serve: read the secret files again); without it SIGHUP keeps its default. */
  readonly onReloadSignal?: (listener: () => void) => void;
}

/** Exit codes as values (cloud-sql-proxy style): 0 ok, 1 a failed check or runtime failure, 2 bad usage. */
export const EXIT = { ok: 0, failed: 1, usage: 2 } as const;
export type ExitCode = (typeof EXIT)[keyof typeof EXIT];

export type Command = (argv: string[], io: CommandIo) => Promise<ExitCode>;
