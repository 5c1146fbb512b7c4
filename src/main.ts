#!/usr/bin/env node
// Process entry: argv, signals, exit codes. The only file that touches process.exit.
import { COMMANDS } from './cli/commands.js';
import { EXIT, type CommandIo } from './tools/command.js';

function usage(): string {
  const lines = Object.entries(COMMANDS).map(([name, c]) => `  ${name.padEnd(10)} ${c.summary}`);
  return `Usage: signing-sidecar <command> [options]\n\nCommands:\n${lines.join('\n')}\n\nRun "signing-sidecar <command> --help" for a command's options.\n`;
}

const stopSignal = new Promise<NodeJS.Signals>((resolve) => {
  for (const signal of ['SIGTERM', 'SIGINT'] as const) process.once(signal, () => resolve(signal));
});

async function main(argv: string[]): Promise<number> {
  const [name, ...rest] = argv;
  if (name === undefined || name === '--help' || name === '-h' || name === 'help') {
    process.stdout.write(usage());
    return name === undefined ? EXIT.usage : EXIT.ok;
  }
  const command = COMMANDS[name];
  if (!command) {
    process.stderr.write(`signing-sidecar: unknown command "${name}"\n${usage()}`);
    return EXIT.usage;
  }
  const io: CommandIo = {
    stdout: process.stdout,
    stderr: process.stderr,
    env: process.env,
    stopSignal,
    // Only a command that registers a listener (serve) gives SIGHUP a meaning; others keep its default (exit).
    onReloadSignal: (listener) => process.on('SIGHUP', listener),
  };
  const run = await command.load();
  return run(rest, io);
}

main(process.argv.slice(2)).then(
  (code) => process.exit(code),
  (err: unknown) => {
    // Unexpected failures print the error type and message only: stack traces can carry values.
    const message = err instanceof Error ? `${err.name}: ${err.message}` : 'unknown error';
    process.stderr.write(`signing-sidecar: fatal: ${message}\n`);
    process.exit(EXIT.failed);
  },
);
