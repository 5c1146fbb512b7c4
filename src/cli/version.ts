import { packageVersion } from '../observability/package-version.js';
import { parseCommandLine } from '../tools/usage.js';
import { EXIT, type Command } from '../tools/command.js';

const USAGE = 'usage: signing-sidecar --version';
const HELP = `${USAGE}

Prints the package version (the "version" of package.json) and exits 0.
`;

/** `signing-sidecar --version`: the version alone on one line, so scripts can compare it. */
export const version: Command = (argv, io) => {
  const parsed = parseCommandLine(argv, {}, io, { usage: USAGE, help: HELP });
  if (typeof parsed === 'number') return Promise.resolve(parsed);
  io.stdout.write(`${packageVersion()}\n`);
  return Promise.resolve(EXIT.ok);
};
