import { startSidecar, type RunningSidecar } from '../app.js';
import type { Config } from '../config/config.js';
import { collectConfig } from '../config/load.js';
import { settingName } from '../config/schema.js';
import { ConfigError } from '../errors.js';
import { releaseStartUpGarbage } from '../memory/start-up-garbage.js';
import { parseCommandLine } from '../tools/usage.js';
import { EXIT, type Command, type CommandIo } from '../tools/command.js';

const USAGE = `Usage: signing-sidecar serve

Runs the sidecar. Every setting comes from SIDECAR_* environment variables or the file named by
SIDECAR_CONFIG_FILE (see README "Configuration"). Stops gracefully on SIGTERM/SIGINT. SIGHUP reads the
secret files (private key, password, upstream CA) again at once; they are also polled every second.
`;

/** Listen failures that the configuration causes: a host that does not resolve, or is not an address of this host. */
const CONFIG_LISTEN_CODES = new Set(['ENOTFOUND', 'EAI_AGAIN', 'EAI_FAIL', 'EAI_NONAME', 'EADDRNOTAVAIL']);

/**
 * A listener that cannot start because of its host setting is a configuration error (exit 2) naming the setting.
 * collectConfig resolves both hosts beforehand; this covers what only the listen call finds (an address that is not
 * this host's, a name that stopped resolving in between).
 */
function listenRefusal(err: unknown, config: Config): string | undefined {
  const e = err as NodeJS.ErrnoException & { hostname?: unknown; address?: unknown };
  if (typeof e.code !== 'string' || !CONFIG_LISTEN_CODES.has(e.code)) return undefined;
  const host = e.syscall === 'getaddrinfo' ? e.hostname : e.syscall === 'listen' ? e.address : undefined;
  const key = host === config.listen.host ? 'listen.host' : host === config.admin.host ? 'admin.host' : undefined;
  if (key === undefined || typeof host !== 'string') return undefined;
  return `${settingName(key)}: cannot listen on "${host}" (${e.code})`;
}

function configurationError(io: CommandIo, message: string): typeof EXIT.usage {
  io.stderr.write(`signing-sidecar: configuration error: ${message}\n`);
  return EXIT.usage;
}

export const serve: Command = async (argv, io) => {
  const flags = parseCommandLine(argv, {}, io, { usage: USAGE, help: USAGE });
  if (typeof flags === 'number') return flags;
  const loaded = await collectConfig(io.env);
  if (!loaded.ok) {
    // One line per refused setting, all of them; the process refuses to start (no half-configured proxy).
    for (const err of loaded.errors) configurationError(io, err.message);
    return EXIT.usage;
  }
  let sidecar: RunningSidecar | undefined;
  // Registered before start: a SIGHUP during start-up must not kill the process (its default); it is a no-op
  // until the sidecar runs, and the files are polled anyway.
  io.onReloadSignal?.(() => void sidecar?.reload());
  try {
    sidecar = await startSidecar(loaded.config);
  } catch (err) {
    // What the PKCS#11 token refused at start (module, token, PIN, key): named by its setting, like the others.
    if (err instanceof ConfigError) return configurationError(io, err.message);
    const refusal = listenRefusal(err, loaded.config);
    if (refusal === undefined) throw err;
    return configurationError(io, refusal);
  }
  const running = sidecar;
  // Here rather than in startSidecar: a collection is the whole process's, and serve's process runs one sidecar.
  releaseStartUpGarbage();
  const signal = await Promise.race([io.stopSignal, running.stopped.then(() => undefined)]);
  if (signal) await running.shutdown(signal);
  return EXIT.ok;
};
