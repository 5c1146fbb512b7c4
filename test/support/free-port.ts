import { createServer, type AddressInfo } from 'node:net';

/**
 * A port free right now on 127.0.0.1, for a program that must be told its port before it starts (Prometheus'
 * scrape target, a `check` run against a port nothing listens on). Servers of our own listen on port 0 instead.
 */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as AddressInfo;
      server.close(() => resolve(port));
    });
  });
}
