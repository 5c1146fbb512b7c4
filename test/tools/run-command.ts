import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { PassThrough, Readable } from 'node:stream';
import type { Command, CommandIo, ExitCode } from '../../src/tools/command.js';

export interface CommandRun {
  readonly code: ExitCode;
  readonly stdout: string;
  readonly stderr: string;
}

function capture(): { stream: PassThrough; text: () => string } {
  const stream = new PassThrough();
  const chunks: Buffer[] = [];
  stream.on('data', (c: Buffer) => chunks.push(c));
  return { stream, text: () => Buffer.concat(chunks).toString('utf8') };
}

/** Runs a command with captured output and the given environment (never the test process's own). */
export async function runCommand(command: Command, argv: string[], env: NodeJS.ProcessEnv = {}): Promise<CommandRun> {
  const out = capture();
  const err = capture();
  const io: CommandIo = {
    stdout: out.stream,
    stderr: err.stream,
    env,
    stopSignal: new Promise<NodeJS.Signals>(() => {}),
  };
  const code = await command(argv, io);
  out.stream.end();
  err.stream.end();
  return { code, stdout: out.text(), stderr: err.text() };
}

export function stdinOf(text: string): () => Readable {
  return () => Readable.from([Buffer.from(text, 'utf8')]);
}

/** A fresh temporary directory, removed by the returned cleanup. */
export async function tempDir(): Promise<{ dir: string; cleanup: () => Promise<void> }> {
  const dir = await mkdtemp(join(tmpdir(), 'sidecar-tools-'));
  return { dir, cleanup: () => rm(dir, { recursive: true, force: true }) };
}
