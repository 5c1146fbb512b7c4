import type { Server } from 'node:http';
import type { ProxyRequest } from './proxy/request.js';

/**
 * The egress listener's requests, from arrival until the client's connection for them closes, and until their
 * handling is settled: shutdown waits for the first to stop serving, and for the second before it closes the
 * state store (a request cut off by shutdown still writes its idempotency record afterwards).
 */
export class ConnectionTracker {
  private readonly open = new Set<ProxyRequest>();
  private readonly unsettled = new Set<ProxyRequest>();
  private readonly idleWaiters: Array<() => void> = [];
  private isDraining = false;

  /** From shutdown's first step on: readiness is false and every answer asks its client to close the connection. */
  get draining(): boolean {
    return this.isDraining;
  }

  beginDraining(): void {
    this.isDraining = true;
  }

  /** Called once per request, from the server's request listener. */
  track(request: ProxyRequest): void {
    this.open.add(request);
    this.unsettled.add(request);
    request.onClose(() => this.finished(request));
    void request.done.then(() => this.unsettled.delete(request));
  }

  private finished(request: ProxyRequest): void {
    this.open.delete(request);
    if (this.open.size === 0) this.idleWaiters.splice(0).forEach((wake) => wake());
  }

  get active(): number {
    return this.open.size;
  }

  /** Requests still waiting for their answer. */
  unanswered(): ProxyRequest[] {
    return [...this.open].filter((request) => !request.isAnswered);
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

  /**
   * Resolves true once every request's handling is settled (its idempotency record written, its line logged), or
   * false after `maxMs`. Again after each round: a request may have arrived while the others were settling.
   */
  async settled(maxMs: number): Promise<boolean> {
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<false>((resolve) => (timer = setTimeout(() => resolve(false), maxMs)));
    try {
      while (this.unsettled.size > 0) {
        const all = Promise.all([...this.unsettled].map((request) => request.done)).then(() => true);
        if (!(await Promise.race([all, timeout]))) return false;
      }
      return true;
    } finally {
      clearTimeout(timer);
    }
  }
}

export function closeServer(server: Server): Promise<void> {
  return new Promise((resolve) => {
    if (!server.listening) return resolve();
    server.close(() => resolve());
    server.closeIdleConnections();
  });
}
