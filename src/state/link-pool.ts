import type { RedisLink } from './redis-client.js';

/**
 * Connections of their own for acknowledged writes (a write, then WAIT on the connection that made it). WAIT blocks
 * the connection it runs on until the replicas hold its writes or its timeout passes: on the store's shared
 * connection, one caller's WAIT held every command queued behind it (tokens, reads, the inbox's reads). Here each
 * acknowledged write sends its write and its WAIT on the least busy of these links; the rest of the store's commands
 * stay on the shared connection. A link is not leased: under load, writes of several callers pipeline on one link and
 * one WAIT answers for all of them (it counts every write the link made before it), so a busy replica costs latency,
 * never a cap on writes in flight. Four: a stalled replica blocks four WAITs at a time, not one after the other.
 */
export const ACKNOWLEDGED_WRITE_CONNECTIONS = 4;

/** No link of the pool is connected: the write cannot be made (the store counts as unavailable meanwhile). */
export class PoolNotConnected extends Error {
  override readonly name = 'PoolNotConnected';
  constructor() {
    super('not connected');
  }
}

/** Links shared by acknowledged writes, each sent to the connected link with the fewest of them in flight. */
export class LinkPool {
  private readonly inFlight = new Map<RedisLink, number>();

  constructor(readonly links: readonly RedisLink[]) {
    for (const link of links) this.inFlight.set(link, 0);
  }

  /**
   * Some link is connected: every acknowledged write can be made (the store counts as available only then). One link
   * down, or slow behind a WAIT, is no outage: the writes go to the others.
   */
  anyReady(): boolean {
    return this.links.some((link) => link.isReady);
  }

  /** Runs `use` (a write and its WAIT) on the least busy connected link; PoolNotConnected when none is. */
  async use<T>(use: (link: RedisLink) => Promise<T>): Promise<T> {
    const link = this.leastBusy();
    if (link === undefined) throw new PoolNotConnected();
    this.inFlight.set(link, (this.inFlight.get(link) ?? 0) + 1);
    try {
      return await use(link);
    } finally {
      this.inFlight.set(link, (this.inFlight.get(link) ?? 1) - 1);
    }
  }

  private leastBusy(): RedisLink | undefined {
    let best: RedisLink | undefined;
    for (const link of this.links) {
      if (!link.isReady) continue;
      if (best === undefined || (this.inFlight.get(link) ?? 0) < (this.inFlight.get(best) ?? 0)) best = link;
    }
    return best;
  }
}
