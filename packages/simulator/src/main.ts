// Process entry of `gateway-simulator`: argv, signals, exit code.
import { simulate } from './cli.js';

const stopSignal = new Promise<NodeJS.Signals>((resolve) => {
  for (const signal of ['SIGTERM', 'SIGINT'] as const) process.once(signal, () => resolve(signal));
});

simulate(process.argv.slice(2), { stdout: process.stdout, stderr: process.stderr, stopSignal }).then(
  (code) => process.exit(code),
  (err: unknown) => {
    const message = err instanceof Error ? `${err.name}: ${err.message}` : 'unknown error';
    process.stderr.write(`gateway-simulator: fatal: ${message}\n`);
    process.exit(1);
  },
);
