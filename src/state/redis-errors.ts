import { ErrorReply } from '@redis/client';

/** Our own deadline passed (the client's timeout option only covers commands not yet written to the socket). */
export class RedisCommandTimeout extends Error {
  override readonly name = 'RedisCommandTimeout';
  constructor(readonly timeoutMs: number) {
    super(`timeout after ${timeoutMs} ms`);
  }
}

/**
 * WAIT answered, with fewer replicas than required: Redis is up, but a write a failover could take back must not
 * count. Not an outage of the store (the store stays available for everything else); its own log reason and metric.
 */
export class ReplicasBehind extends Error {
  override readonly name = 'ReplicasBehind';
  constructor(
    readonly acknowledged: number,
    readonly wanted: number,
  ) {
    super(`${acknowledged} of ${wanted} replicas acknowledged in time`);
  }
}

/**
 * The connection of an acknowledged write was lost or reconnected before its WAIT answered: the WAIT ran, or would
 * run, on a connection that did not make the write, so its count says nothing of it. Refused as a WAIT that counted
 * too few replicas is; the link's own error already said whether Redis is away.
 */
export class ConnectionReplaced extends Error {
  override readonly name = 'ConnectionReplaced';
  constructor() {
    super('connection lost or replaced between the write and its WAIT');
  }
}

/** Error codes that mean the settings are wrong, not that Redis is away: the log says what to check. */
const CREDENTIAL_CODES = new Set(['WRONGPASS', 'NOAUTH', 'NOPERM']);

/**
 * What a log line or an error message may say about a Redis failure. A Redis error reply is reduced to its code
 * (WRONGPASS, NOPERM, OOM, READONLY...): the text after it may quote a key or an argument. Connection errors
 * (ECONNREFUSED, TLS verification, a closed socket) name only the address and the cause.
 */
export function describeRedisError(err: unknown): string {
  if (err instanceof RedisCommandTimeout || err instanceof ReplicasBehind || err instanceof ConnectionReplaced)
    return err.message;
  if (err instanceof ErrorReply) {
    const code = /^[A-Z]+/.exec(err.message)?.[0] ?? 'ERR';
    return CREDENTIAL_CODES.has(code)
      ? `Redis refused the credentials or a command (${code}): check SIDECAR_REDIS_USERNAME, SIDECAR_REDIS_PASSWORD_FILE and the user's ACL rules`
      : `Redis answered an error (${code})`;
  }
  if (err instanceof Error) return firstLine(err.message) || err.name;
  // node-redis's Sentinel client reports some failures as text, not as an Error: its observer's connection to a
  // Sentinel ("obseve client error: Error: ...", as it spells it), while the sidecar looks for the primary.
  if (typeof err === 'string') return firstLine(err) || 'unknown error';
  return 'unknown error';
}

const firstLine = (text: string): string => (text.split('\n')[0] ?? '').slice(0, 200);
