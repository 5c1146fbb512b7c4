// Runs the stand-in in its own process, so its CPU never counts against the sidecar or the load generator.
// Prints one line {"url": "..."} and exits when its stdin closes (the parent died or finished).
import { createStandIn, listenOnLoopback } from './gateway.js';

const server = createStandIn();
const url = await listenOnLoopback(server);
process.stdout.write(`${JSON.stringify({ url })}\n`);
process.stdin.resume();
process.stdin.on('end', () => {
  server.closeAllConnections();
  server.close();
});
