import type { IncomingMessage, Server, ServerResponse } from 'node:http';
import { InboundExchange } from './proxy/inbound-exchange.js';
import { requestId } from './proxy/request-id.js';

/** Tracks a server's in-flight requests, one InboundExchange each, so shutdown can wait for the work, not guess. */
export class ConnectionTracker {
  private readonly open = new Map<ServerResponse, InboundExchange>();
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
  track(req: IncomingMessage, res: ServerResponse): InboundExchange {
    const exchange = new InboundExchange(requestId(req.headers['x-request-id']), res, () => this.isDraining, req);
    this.open.set(res, exchange);
    res.once('close', () => this.finished(res));
    return exchange;
  }

  private finished(res: ServerResponse): void {
    this.open.delete(res);
    if (this.open.size === 0) this.idleWaiters.splice(0).forEach((wake) => wake());
  }

  get active(): number {
    return this.open.size;
  }

  /** Requests still waiting for their answer. */
  unanswered(): InboundExchange[] {
    return [...this.open.values()].filter((exchange) => !exchange.isAnswered);
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

export function closeServer(server: Server): Promise<void> {
  return new Promise((resolve) => {
    if (!server.listening) return resolve();
    server.close(() => resolve());
    server.closeIdleConnections();
  });
}
