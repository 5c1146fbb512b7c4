import { EXIT } from '../cli/command.js';
/**
 * Runs a node:util parseArgs call and turns its TypeError (unknown flag, missing value) into exit code 2 with
 * the command's usage line, so every tool fails the same way on bad input.
 */
export function parseCommandLine(parse, io, usage) {
    try {
        return parse();
    }
    catch (err) {
        usageFailure(io, usage, err.message);
        return undefined;
    }
}
/** Prints the reason and the usage line on stderr; returns the usage exit code for `return usageFailure(...)`. */
export function usageFailure(io, usage, reason) {
    io.stderr.write(`error: ${reason}\n${usage}\n`);
    return EXIT.usage;
}
/** Prints a runtime failure (exit 1): the command line was fine but the work could not be done. */
export function runtimeFailure(io, reason) {
    io.stderr.write(`error: ${reason}\n`);
    return EXIT.failed;
}
