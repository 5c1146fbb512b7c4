import { EXIT, type CommandIo, type ExitCode } from '../cli/command.js';

/**
 * Runs a node:util parseArgs call and turns its TypeError (unknown flag, missing value) into exit code 2 with
 * the command's usage line, so every tool fails the same way on bad input.
 */
export function parseCommandLine<T>(parse: () => T, io: CommandIo, usage: string): T | undefined {
  try {
    return parse();
  } catch (err) {
    usageFailure(io, usage, (err as Error).message);
    return undefined;
  }
}

/** Prints the reason and the usage line on stderr; returns the usage exit code for `return usageFailure(...)`. */
export function usageFailure(io: CommandIo, usage: string, reason: string): ExitCode {
  io.stderr.write(`error: ${reason}\n${usage}\n`);
  return EXIT.usage;
}

/** Prints a runtime failure (exit 1): the command line was fine but the work could not be done. */
export function runtimeFailure(io: CommandIo, reason: string): ExitCode {
  io.stderr.write(`error: ${reason}\n`);
  return EXIT.failed;
}
