// The receiver's own listener (issue 15), apart from the egress one: a slow or hostile sender on the public side
// can hold at most this server's connections, never the egress listener's or the gateway client's.
import { createServer, type Server, type ServerResponse } from 'node:http';
import type { KeyObject } from 'node:crypto';
import type { PostbackConfig } from '../config/postback-settings.js';
import { nonceTtlSeconds } from '../config/postback-settings.js';
import type { Logger } from '../observability/log.js';
import type { PostbackMetrics } from '../observability/postback-metrics.js';
import type { StateStore } from '../state/state-store.js';
import { createPostbackForwarder } from './forward.js';
import { createPostbackHandler } from './handler.js';
import { signedPostbackUrl } from './public-url.js';
import { ReplayMemory } from './replay-memory.js';
import { createPostbackVerifier } from './verify-postback.js';

/**
 * A sender gets 10 s for its headers and 15 s for the whole request (the body deadline: a body trickling in is
 * cut with 408); an idle keep-alive connection is closed after 5 s. The answer may take up to the forward
 * timeout: no timeout applies to it here.
 */
const RECEIVER_LISTENER = {
  headersTimeout: 10_000,
  requestTimeout: 15_000,
  keepAliveTimeout: 5_000,
  connectionsCheckingInterval: 1_000,
  maxHeaderSize: 16_384,
} as const;

/** After the abort, the time the aborted postbacks get to write their 503 before their connections go. */
const ABORTED_ANSWER_MS = 1_000;

export interface PostbackReceiverDeps {
  readonly store: StateStore;
  readonly metrics: PostbackMetrics;
  readonly log: Logger;
  readonly nowMs?: () => number;
}

export interface PostbackReceiver {
  readonly server: Server;
  /** Installs the keys of a rotated SIDECAR_POSTBACK_PUBLIC_KEY_FILE: the next postback is verified with them. */
  replaceKeys(keys: readonly KeyObject[]): void;
  /** Listens on the configured host and port; resolves with the local URL. */
  start(): Promise<string>;
  /** Stops accepting, lets postbacks in flight finish up to `maxMs`, answers the rest 503 (redelivered), closes. */
  close(maxMs: number): Promise<void>;
}

export function createPostbackReceiver(config: PostbackConfig, deps: PostbackReceiverDeps): PostbackReceiver {
  const stopping = new AbortController();
  let keys = config.publicKeys;
  const forwarder = createPostbackForwarder(config.forwardUrl, config.forwardTimeoutMs);
  const memory = new ReplayMemory(deps.store, {
    nonceTtlMs: nonceTtlSeconds(config) * 1000,
    deliveredTtlMs: config.deliveredTtlSeconds * 1000,
    forwardTimeoutMs: config.forwardTimeoutMs,
  });
  const handle = createPostbackHandler({
    path: config.publicUrl.path,
    allow: config.allowCidrs,
    verify: createPostbackVerifier({
      ...config,
      publicKeys: () => keys,
      signedUrl: signedPostbackUrl(config.publicUrl),
    }),
    memory,
    forwarder,
    metrics: deps.metrics,
    log: deps.log,
    nowMs: deps.nowMs ?? Date.now,
    stopping: stopping.signal,
  });
  const open = new Set<ServerResponse>();
  const idleWaiters = new Set<() => void>();
  const waitIdle = (ms: number) =>
    new Promise<void>((resolve) => {
      if (open.size === 0) return resolve();
      const done = () => {
        clearTimeout(timer);
        idleWaiters.delete(done);
        resolve();
      };
      const timer = setTimeout(done, ms);
      idleWaiters.add(done);
    });
  const server = createServer(RECEIVER_LISTENER, (req, res) => {
    open.add(res);
    res.once('close', () => {
      open.delete(res);
      if (open.size === 0) for (const wake of [...idleWaiters]) wake();
    });
    if (!server.listening) res.setHeader('connection', 'close');
    void handle(req, res);
  });
  server.maxConnections = config.maxConnections;
  return {
    server,
    replaceKeys: (next) => {
      keys = next;
    },
    start: () => listenOn(server, config.listen.host, config.listen.port),
    async close(maxMs) {
      const closed = new Promise<void>((resolve) => server.close(() => resolve()));
      server.closeIdleConnections();
      await waitIdle(maxMs);
      // Forwards still waiting are aborted: each is answered 503 and its claim released, so it is redelivered.
      stopping.abort();
      await waitIdle(ABORTED_ANSWER_MS);
      server.closeAllConnections();
      await Promise.all([closed, forwarder.close()]);
    },
  };
}

function listenOn(server: Server, host: string, port: number): Promise<string> {
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
