import { rootCertificates } from 'node:tls';
import { createClient } from '@redis/client';

/** How long one connection attempt (TCP, TLS, AUTH, SELECT) may take before it counts as failed and is retried. */
export const REDIS_CONNECT_TIMEOUT_MS = 2_000;
/** Reconnect backoff: 100 ms doubling up to this cap (plus jitter), forever: Redis coming back is always noticed. */
export const REDIS_RECONNECT_MAX_MS = 1_000;
/** Commands waiting for a stalled Redis: past this, new ones fail at once instead of piling up in memory. */
const MAX_QUEUED_COMMANDS = 10_000;

export interface RedisConnectionOptions {
  /** redis:// or rediss://, with an optional database number; never with credentials (config refuses them). */
  readonly url: string;
  readonly username?: string | undefined;
  /**
   * The password, or where to get it at each connection attempt (open-store.ts reads the password file again, so a
   * rotated password is used by the next connection; connections already logged in stay so).
   */
  readonly password?: string | (() => Promise<string>) | undefined;
  /** PEM of an extra CA for rediss://, trusted besides the usual roots (a private CA, a cluster-internal Redis). */
  readonly ca?: string | undefined;
}

function reconnectDelay(retries: number): number {
  return Math.min(100 * 2 ** retries, REDIS_RECONNECT_MAX_MS) + Math.floor(Math.random() * 100);
}

/**
 * One node-redis connection as the store needs it: RESP2 (any Redis from 5 on, and every managed offering),
 * no offline queue (a command while disconnected fails at once: an outage must fail fast, never queue), a
 * bounded queue, capped reconnect backoff, no CLIENT SETINFO (one command less for the ACL rules to allow).
 * Not connected yet: the caller attaches its `error` listener first (node-redis throws an unheard error).
 */
export function createRedisConnection(options: RedisConnectionOptions) {
  const common = { connectTimeout: REDIS_CONNECT_TIMEOUT_MS, reconnectStrategy: reconnectDelay };
  const socket = options.url.startsWith('rediss:')
    ? { ...common, tls: true as const, ...(options.ca !== undefined ? { ca: [...rootCertificates, options.ca] } : {}) }
    : { ...common, tls: false as const };
  return createClient({
    url: options.url,
    RESP: 2,
    socket,
    disableOfflineQueue: true,
    commandsQueueMaxLength: MAX_QUEUED_COMMANDS,
    disableClientInfo: true,
    maintNotifications: 'disabled',
    ...credentials(options),
  });
}

/** AUTH at every connection attempt (RESP2: `AUTH [username] password`), with the password as of that moment. */
function credentials(options: RedisConnectionOptions) {
  const { username, password } = options;
  if (password === undefined) return {};
  const current = typeof password === 'function' ? password : () => Promise.resolve(password);
  const credentialsProvider = {
    type: 'async-credentials-provider' as const,
    credentials: async () => ({ ...(username !== undefined ? { username } : {}), password: await current() }),
  };
  return { credentialsProvider };
}

export type RedisConnection = ReturnType<typeof createRedisConnection>;
