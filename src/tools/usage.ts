import { parseArgs, type ParseArgsConfig } from 'node:util';
import { EXIT, type CommandIo, type ExitCode } from './command.js';

type FlagOptions = NonNullable<ParseArgsConfig['options']>;
const HELP_FLAG = { help: { type: 'boolean', short: 'h' } } as const;

/** The parsed flag values of `options` (every command also takes --help/-h). */
export type Flags<O extends FlagOptions> = ReturnType<
  typeof parseArgs<{ args: string[]; options: O & typeof HELP_FLAG; strict: true; allowPositionals: false }>
>['values'];

/**
 * Parses a command's flags the same way for every tool: an unknown flag or a missing value is exit 2 with the
 * usage line; --help prints the help and is exit 0. Returns the values, or the exit code when the command is done.
 */
export function parseCommandLine<const O extends FlagOptions>(
  argv: string[],
  options: O,
  io: CommandIo,
  text: { readonly usage: string; readonly help: string },
): Flags<O> | ExitCode {
  let values: Flags<O>;
  try {
    values = parseArgs({
      args: argv,
      strict: true,
      allowPositionals: false,
      options: { ...options, ...HELP_FLAG },
    }).values;
  } catch (err) {
    return usageFailure(io, text.usage, (err as Error).message);
  }
  if ((values as { help?: boolean }).help === true) {
    io.stdout.write(text.help);
    return EXIT.ok;
  }
  return values;
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
