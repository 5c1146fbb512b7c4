import { createServer, type AddressInfo } from 'node:net';

/** The stable ports this process has handed out: free when checked, but maybe not yet bound by their server. */
const handedOut = new Set<number>();

/**
 * A port free right now below the kernel's ephemeral range (32768 and up on Linux). Servers of our own listen on port
 * 0; this is for a server told its port before it binds it (Prometheus, Squid, a postback listener whose URL the
 * gateway is given first), one stopped and started again on the same port (redis-server in outage tests), and a port
 * nothing must listen on (`check` against a closed port): meanwhile a port-0 listener of another test can take any
 * free ephemeral port (EADDRINUSE, or an answer where a refusal was expected), but never this one. Never the same one
 * twice in a process: a port handed out is free until its server binds it, and a second caller (the chaos world's
 * fifteen) would be given it too.
 */
export async function freeStablePort(): Promise<number> {
  for (;;) {
    const candidate = 20_000 + Math.floor(Math.random() * 12_000);
    if (handedOut.has(candidate)) continue;
    const port = await bindable(candidate).catch(() => undefined);
    if (port === undefined) continue;
    handedOut.add(port);
    return port;
  }
}

function bindable(port: number): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(port, '127.0.0.1', () => {
      const { port: bound } = server.address() as AddressInfo;
      server.close(() => resolve(bound));
    });
  });
}
