import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { Registry } from 'prom-client';

export interface HealthState {
  /** Startup finished: the key loaded and a first token was obtained. */
  started(): boolean;
  /** Ready for traffic: valid token, not draining. */
  ready(): boolean;
}

export interface AdminOptions {
  readonly registry: Registry;
  readonly health: HealthState;
  /** When set, loopback-only POST /quitquitquit calls it (for jobs that must stop their sidecar). */
  readonly onQuit?: () => void;
}

/**
 * The admin listener: probes and metrics on their own port, so a flood of client traffic or a slow gateway
 * never makes Kubernetes probes fail, and metrics are scraped from outside the pod without exposing the proxy.
 */
export function createAdminServer(options: AdminOptions): Server {
  return createServer((req, res) => {
    route(options, req, res).catch(() => {
      if (!res.headersSent) send(res, 500, 'text/plain', 'internal error\n');
    });
  });
}

async function route(options: AdminOptions, req: IncomingMessage, res: ServerResponse): Promise<void> {
  const path = (req.url ?? '/').split('?', 1)[0];
  if (req.method === 'POST' && path === '/quitquitquit' && options.onQuit) {
    if (!isLoopback(req.socket.remoteAddress)) return send(res, 403, 'text/plain', 'loopback only\n');
    send(res, 202, 'text/plain', 'shutting down\n');
    options.onQuit();
    return;
  }
  if (req.method !== 'GET' && req.method !== 'HEAD') return send(res, 405, 'text/plain', 'method not allowed\n');
  switch (path) {
    case '/livez':
      return send(res, 200, 'text/plain', 'ok\n');
    case '/readyz':
      return probe(res, options.health.ready());
    case '/startupz':
      return probe(res, options.health.started());
    case '/metrics':
      return send(res, 200, options.registry.contentType, await options.registry.metrics());
    default:
      return send(res, 404, 'text/plain', 'not found\n');
  }
}

function probe(res: ServerResponse, ok: boolean): void {
  send(res, ok ? 200 : 503, 'text/plain', ok ? 'ok\n' : 'not ready\n');
}

function send(res: ServerResponse, status: number, contentType: string, body: string): void {
  res.writeHead(status, { 'content-type': contentType, 'content-length': Buffer.byteLength(body) });
  res.end(body);
}

/** Loopback peers only: /quitquitquit must not be reachable from other pods even when the admin port is. */
export function isLoopback(address: string | undefined): boolean {
  return address === '::1' || address?.startsWith('127.') === true || address?.startsWith('::ffff:127.') === true;
}
