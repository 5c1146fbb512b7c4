// Opening and closing a listener, the same for every one of the sidecar's servers (the egress proxy, the postback
// receiver, the admin server).
import type { Server } from 'node:http';

/** Listens on host:port (0: any free port); resolves with the server's http:// URL, the address it really got. */
export function listen(server: Server, host: string, port: number): Promise<string> {
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => {
      server.off('error', reject);
      const address = server.address();
      if (address === null || typeof address === 'string') return reject(new Error('no TCP address'));
      const hostPart = address.family === 'IPv6' ? `[${address.address}]` : address.address;
      resolve(`http://${hostPart}:${address.port}`);
    });
  });
}

/** Stops accepting and closes the idle connections; resolves once the server is closed. */
export function closeServer(server: Server): Promise<void> {
  return new Promise((resolve) => {
    if (!server.listening) return resolve();
    server.close(() => resolve());
    server.closeIdleConnections();
  });
}
