import type { IncomingMessage, Server, ServerResponse } from 'node:http';
import type { Registry } from 'prom-client';
import { createPolicyServer, type ConnectionRefusal } from '../inbound/connection-policy.js';
import { ADMIN_CONNECTIONS } from './admin-listener.js';
import { httpDate, isoTimestamp } from '../time/utc-time.js';

/** The access token as the admin listener reports it: state and expiry times only, never a token. */
export interface TokenHealth {
  /** A token that is not expired and not rejected is held. */
  readonly valid: boolean;
  /** Unix time (ms) when the held access token expires; absent without a valid token. */
  readonly accessExpiresAtMs?: number;
  /** Unix time (ms) when the held refresh token expires; absent without a valid token. */
  readonly refreshExpiresAtMs?: number;
}

export interface HealthState {
  /** Startup finished: the key is loaded and the egress listener accepts connections. Never waits for a token. */
  started(): boolean;
  /** /readyz: serving, and holding a valid token when readiness requires one (`readinessRequiresToken`). */
  ready(): boolean;
  /** The egress listener accepts connections and no shutdown has begun. */
  serving(): boolean;
  token(): TokenHealth;
}

export interface AdminOptions {
  readonly registry: Registry;
  readonly health: HealthState;
  /** SIDECAR_READINESS_REQUIRES_TOKEN: whether `health.ready()` includes the token (reported by the detailed views). */
  readonly readinessRequiresToken: boolean;
  /** GET /openapi.json: the egress listener's contract for this configuration (openapi.ts), as JSON text. */
  readonly openApiJson?: () => string;
  /**
   * GET /limits, loopback only (`signing-sidecar limits` in the pod): each money limit's use and what is left
   * (docs/limits.md); 404 without SIDECAR_LIMITS_FILE. The amounts are the business's, not for other pods.
   */
  readonly limitFigures?: (() => Promise<object>) | undefined;
  /** When set, loopback-only POST /quitquitquit calls it (for jobs that must stop their sidecar). */
  readonly onQuit?: () => void;
  /** True past the memory high-water mark (memory/pressure.ts): one metrics page is made at a time. */
  readonly overloaded?: () => boolean;
  /** A scrape answered 503 because of it. */
  readonly onShed?: () => void;
  /** A connection or request the connection policy refused. */
  readonly onRefused?: (reason: ConnectionRefusal) => void;
}

/** Paths answered to GET and HEAD; /quitquitquit (POST) exists only when enabled. */
const READ_PATHS = new Set([
  '/livez',
  '/startupz',
  '/readyz',
  '/healthz/token',
  '/metrics',
  '/openapi.json',
  '/limits',
]);

/**
 * The admin listener: probes and metrics on their own port, so a flood of client traffic or a slow gateway
 * never makes Kubernetes probes fail, and metrics are scraped from outside the pod without exposing the egress listener.
 */
export function createAdminServer(options: AdminOptions): Server {
  const renders = { active: 0 };
  // It listens on every address of the pod: connections that never finish, come by the thousand, or pipeline
  // requests are cut (admin-listener.ts).
  return createPolicyServer(
    ADMIN_CONNECTIONS,
    { onRefused: options.onRefused ?? (() => undefined) },
    {
      request: (req, res) => {
        route(options, renders, req, res).catch(() => {
          if (!res.headersSent) send(res, 500, 'text/plain', 'internal error\n');
        });
      },
      // Node's own 417 for an Expect other than 100-continue would carry Node's Date (src/time/utc-time.ts): ours instead.
      unmetExpectation: (_req, res) => send(res, 417, 'text/plain', ''),
    },
  );
}

/**
 * Every admin answer but the metrics page is made from state the process holds or a text made once, whatever the
 * memory pressure. The metrics page (150 KB of text, made anew) is made for this many scrapes at once, and for one
 * near the memory limit: the pressure gauge is still scraped while a flood of scrapes is not rendered (503).
 */
const RENDERS_AT_ONCE = 8;

async function route(
  options: AdminOptions,
  renders: { active: number },
  req: IncomingMessage,
  res: ServerResponse,
): Promise<void> {
  const url = req.url ?? '/';
  const mark = url.indexOf('?');
  const path = mark < 0 ? url : url.slice(0, mark);
  const query = mark < 0 ? '' : url.slice(mark + 1);
  if (path === '/quitquitquit' && options.onQuit) {
    if (req.method !== 'POST') return send(res, 405, 'text/plain', 'method not allowed\n', { allow: 'POST' });
    if (!isLoopback(req.socket.remoteAddress)) return send(res, 403, 'text/plain', 'loopback only\n');
    send(res, 202, 'text/plain', 'shutting down\n');
    options.onQuit();
    return;
  }
  if (!READ_PATHS.has(path)) return send(res, 404, 'text/plain', 'not found\n');
  const overloaded = options.overloaded?.() === true;
  if (path === '/metrics' && renders.active >= (overloaded ? 1 : RENDERS_AT_ONCE)) {
    if (overloaded) options.onShed?.();
    return send(res, 503, 'text/plain', 'busy: near the memory limit, or too many scrapes at once\n', {
      'retry-after': '1',
    });
  }
  if (req.method !== 'GET' && req.method !== 'HEAD') {
    return send(res, 405, 'text/plain', 'method not allowed\n', { allow: 'GET, HEAD' });
  }
  switch (path) {
    case '/livez':
      return probe(res, true);
    case '/startupz':
      return probe(res, options.health.started());
    case '/readyz':
      return hasParam(query, 'verbose') ? readinessReport(res, options) : probe(res, options.health.ready());
    case '/healthz/token':
      return tokenReport(res, options);
    case '/openapi.json':
      if (options.openApiJson === undefined) return send(res, 404, 'text/plain', 'not found\n');
      return send(res, 200, 'application/json', options.openApiJson());
    case '/limits':
      if (options.limitFigures === undefined) return send(res, 404, 'text/plain', 'no limits file\n');
      if (!isLoopback(req.socket.remoteAddress)) return send(res, 403, 'text/plain', 'loopback only\n');
      return sendJson(res, 200, await options.limitFigures());
    default:
      renders.active += 1;
      try {
        return send(res, 200, options.registry.contentType, await options.registry.metrics());
      } finally {
        renders.active -= 1;
      }
  }
}

function probe(res: ServerResponse, ok: boolean): void {
  send(res, ok ? 200 : 503, 'text/plain', ok ? 'ok\n' : 'not ready\n');
}

/** GET /readyz?verbose: the same status as /readyz, with each check that went into it. */
function readinessReport(res: ServerResponse, options: AdminOptions): void {
  const ready = options.health.ready();
  const report = {
    status: ready ? 'ready' : 'not ready',
    checks: {
      serving: options.health.serving(),
      token: tokenView(options),
    },
  };
  sendJson(res, ready ? 200 : 503, report);
}

/** GET /healthz/token: 200 while a valid access token is held, else 503; never part of a probe by default. */
function tokenReport(res: ServerResponse, options: AdminOptions): void {
  const view = tokenView(options);
  sendJson(res, view.valid ? 200 : 503, view);
}

interface TokenView {
  readonly valid: boolean;
  readonly requiredForReadiness: boolean;
  readonly accessExpiresAt?: string;
  readonly accessExpiresInSeconds?: number;
  readonly refreshExpiresAt?: string;
}

/** Built field by field from the token's times, so nothing else a TokenHealth might carry can leak. */
function tokenView(options: AdminOptions): TokenView {
  const token = options.health.token();
  const view: TokenView = { valid: token.valid, requiredForReadiness: options.readinessRequiresToken };
  if (!token.valid) return view;
  return {
    ...view,
    ...(token.accessExpiresAtMs === undefined
      ? {}
      : {
          accessExpiresAt: isoTimestamp(token.accessExpiresAtMs),
          accessExpiresInSeconds: Math.max(0, Math.floor((token.accessExpiresAtMs - Date.now()) / 1000)),
        }),
    ...(token.refreshExpiresAtMs === undefined ? {} : { refreshExpiresAt: isoTimestamp(token.refreshExpiresAtMs) }),
  };
}

function hasParam(query: string, name: string): boolean {
  return new URLSearchParams(query).has(name);
}

function sendJson(res: ServerResponse, status: number, body: object): void {
  send(res, status, 'application/json', `${JSON.stringify(body)}\n`);
}

function send(
  res: ServerResponse,
  status: number,
  contentType: string,
  body: string,
  headers: Record<string, string> = {},
): void {
  res.sendDate = false; // the Date is ours (src/time/utc-time.ts)
  const length = Buffer.byteLength(body);
  res.writeHead(status, { date: httpDate(), ...headers, 'content-type': contentType, 'content-length': length });
  res.end(body);
}

/** Loopback peers only: /quitquitquit must not be reachable from other pods even when the admin port is. */
export function isLoopback(address: string | undefined): boolean {
  return address === '::1' || address?.startsWith('127.') === true || address?.startsWith('::ffff:127.') === true;
}
