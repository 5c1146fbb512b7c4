import type { Server } from 'node:http';
import type { Socket } from 'node:net';

/** Tracks a server's connections and in-flight requests so shutdown can wait for the work, not guess. */
export class ConnectionTracker {
  private inFlight = 0;
  private readonly idleWaiters: Array<() => void> = [];

  constructor(private readonly server: Server) {
    server.on('request', (_req, res: { once(event: 'close', cb: () => void): void }) => {
      this.inFlight++;
      res.once('close', () => {
        this.inFlight--;
        if (this.inFlight === 0) this.idleWaiters.splice(0).forEach((wake) => wake());
      });
    });
  }

  get active(): number {
    return this.inFlight;
  }

  /** Resolves when no request is in flight, or after `maxMs`, whichever comes first; true when drained. */
  waitIdle(maxMs: number): Promise<boolean> {
    if (this.inFlight === 0) return Promise.resolve(true);
    return new Promise((resolve) => {
      const timer = setTimeout(() => resolve(false), maxMs);
      this.idleWaiters.push(() => {
        clearTimeout(timer);
        resolve(true);
      });
    });
  }
}

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

export function closeServer(server: Server): Promise<void> {
  return new Promise((resolve) => {
    if (!server.listening) return resolve();
    server.close(() => resolve());
    server.closeIdleConnections();
  });
}

export function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

export type { Socket };
