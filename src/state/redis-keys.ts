import { createHash } from 'node:crypto';

/** The prefix every key and channel of the sidecar starts with unless SIDECAR_REDIS_KEY_PREFIX says otherwise. */
export const DEFAULT_REDIS_KEY_PREFIX = 'signing-sidecar:';

/**
 * A short, stable name for one vendor account (base address + username): 16 hex digits of a SHA-256, so the
 * username (an email) never appears in Redis, and two accounts (staging and production, two merchants) sharing
 * a Redis never share a key.
 */
export function accountTag(baseUrl: string, username: string): string {
  return createHash('sha256').update(`${baseUrl}\n${username}`).digest('hex').slice(0, 16);
}

/**
 * Where the caller's short names live in Redis: `<prefix>{<account tag>}:<name>`. The braces make the tag the
 * Redis Cluster hash tag, so every key of one account is in one slot and a script may touch several of them.
 * Channels are named the same way (an ACL `&<prefix>*` rule covers them).
 */
export class RedisKeys {
  private readonly scope: string;

  constructor(prefix: string, tag: string) {
    // Redis hashes the text between the first `{` and the next `}`: a brace in the prefix or the tag would make
    // that something else than the account's tag, and one account's keys could land in several slots.
    if (/[{}]/.test(prefix) || !/^[^{}]+$/.test(tag)) throw new RangeError('key prefix and account tag take no braces');
    this.scope = `${prefix}{${tag}}:`;
  }

  key(name: string): string {
    return this.scope + name;
  }

  channel(name: string): string {
    return this.scope + name;
  }
}
