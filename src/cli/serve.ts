import { startSidecar } from '../app.js';
import { loadConfig } from '../config/load.js';
import { ConfigError } from '../errors.js';
import { parseCommandLine } from '../tools/usage.js';
import { EXIT, type Command } from './command.js';

const USAGE = `Usage: signing-sidecar serve

Runs the signing proxy. Every setting comes from SIDECAR_* environment variables or the file named by
SIDECAR_CONFIG_FILE (see README "Configuration"). Stops gracefully on SIGTERM/SIGINT.
`;

export const serve: Command = async (argv, io) => {
  const flags = parseCommandLine(argv, {}, io, { usage: USAGE, help: USAGE });
  if (typeof flags === 'number') return flags;
  let config;
  try {
    config = loadConfig(io.env);
  } catch (err) {
    if (!(err instanceof ConfigError)) throw err;
    // One line naming the setting; the process refuses to start (no half-configured proxy).
    io.stderr.write(`signing-sidecar: configuration error: ${err.message}\n`);
    return EXIT.usage;
  }
  const sidecar = await startSidecar(config);
  const signal = await Promise.race([io.stopSignal, sidecar.stopped.then(() => undefined)]);
  if (signal) await sidecar.shutdown(signal);
  return EXIT.ok;
};
