import { createServer, type AddressInfo } from 'node:net';

/**
 * A loopback port that was free a moment ago and has nothing listening now: for a process that cannot listen on
 * port 0 (Prometheus), or for a connection that must be refused.
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
