// Run as a child process (node --import tsx): starts the sidecar from the SIDECAR_* environment, expecting the start
// to fail; prints the error's code as JSON and lets the process end by itself, never calling process.exit. Its parent
// reads an exit in time as "nothing the failed start opened (a listener, a store connection, a timer) was left".
import { Writable } from 'node:stream';
import { startSidecar } from '../../src/app.js';
import { loadConfig } from '../../src/config/load.js';

const discard = new Writable({ write: (_chunk, _encoding, done) => done() });
try {
  await startSidecar(loadConfig(process.env), { logDestination: discard });
  process.stdout.write(`${JSON.stringify({ started: true })}\n`);
} catch (err) {
  process.stdout.write(`${JSON.stringify({ code: (err as NodeJS.ErrnoException).code })}\n`);
}
