import { startSidecar } from '../app.js';
import { loadConfig } from '../config/load.js';
import { ConfigError } from '../errors.js';
import { EXIT } from './command.js';
const USAGE = `Usage: signing-sidecar serve

Runs the signing proxy. Every setting comes from SIDECAR_* environment variables or the file named by
SIDECAR_CONFIG_FILE (see README "Configuration"). Stops gracefully on SIGTERM/SIGINT.
`;
export const serve = async (argv, io) => {
    if (argv.includes('--help') || argv.includes('-h')) {
        io.stdout.write(USAGE);
        return EXIT.ok;
    }
    if (argv.length > 0) {
        io.stderr.write(`signing-sidecar serve: unexpected argument ${argv[0]}\n${USAGE}`);
        return EXIT.usage;
    }
    let config;
    try {
        config = loadConfig(io.env);
    }
    catch (err) {
        if (!(err instanceof ConfigError))
            throw err;
        // One line naming the setting; the process refuses to start (no half-configured proxy).
        io.stderr.write(`signing-sidecar: configuration error: ${err.message}\n`);
        return EXIT.usage;
    }
    const sidecar = await startSidecar(config);
    const signal = await Promise.race([io.stopSignal, sidecar.stopped.then(() => undefined)]);
    if (signal)
        await sidecar.shutdown(signal);
    return EXIT.ok;
};
