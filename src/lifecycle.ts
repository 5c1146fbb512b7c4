import type { Server, ServerResponse } from 'node:http';

/** Tracks a server's in-flight requests so shutdown can wait for the work, not guess. */
export class ConnectionTracker {
  private readonly open = new Set<ServerResponse>();
  private readonly idleWaiters: Array<() => void> = [];
  // One listener shared by every response (`this` is the response that closed): nothing allocated per request.
  private readonly onClose: (this: ServerResponse) => void;

  constructor() {
    const finished = (res: ServerResponse): void => this.finished(res);
    this.onClose = function (this: ServerResponse): void {
      finished(this);
    };
  }

  /** Called once per request, from the server's request listener. */
  track(res: ServerResponse): void {
    this.open.add(res);
    // 'close' comes once per response; `on` avoids the wrapper that `once` allocates.
    res.on('close', this.onClose);
  }

  private finished(res: ServerResponse): void {
    this.open.delete(res);
    if (this.open.size === 0) this.idleWaiters.splice(0).forEach((wake) => wake());
  }

  get active(): number {
    return this.open.size;
  }

  /** Responses not yet finished (their request is still being handled). */
  unanswered(): ServerResponse[] {
    return [...this.open].filter((res) => !res.headersSent);
  }

  /** Resolves when no request is in flight, or after `maxMs`, whichever comes first; true when drained. */
  waitIdle(maxMs: number): Promise<boolean> {
    if (this.open.size === 0) return Promise.resolve(true);
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

