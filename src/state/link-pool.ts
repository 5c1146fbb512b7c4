import type { RedisLink } from './redis-client.js';

/**
 * Connections of their own for acknowledged writes (a write, then WAIT on the connection that made it). WAIT blocks
 * the connection it runs on until the replicas hold its writes or its timeout passes, and it counts every write that
 * connection made: on the store's shared connection, one caller's WAIT held every command queued behind it and
 * waited for the other callers' writes too. Here each acknowledged write leases a link for its write and its WAIT,
 * alone; the rest of the store's commands stay on the shared connection. Four: a keyed request makes about three
 * acknowledged writes of a millisecond or two each with a nearby replica, so four in flight carry well over 200
 * requests a second, and a stalled replica holds four connections, not the store.
 */
export const ACKNOWLEDGED_WRITE_CONNECTIONS = 4;

/** No link of the pool is connected: the write cannot be made (the store counts as unavailable meanwhile). */
export class PoolNotConnected extends Error {
  override readonly name = 'PoolNotConnected';
  constructor() {
    super('not connected');
  }
}

/** Every link was leased for longer than the caller could wait: nothing was sent. */
export class PoolExhausted extends Error {
  override readonly name = 'PoolExhausted';
  constructor(readonly timeoutMs: number) {
    super(`no connection for acknowledged writes free within ${timeoutMs} ms`);
  }
}

/** Links leased one caller at a time, first come first served. */
export class LinkPool {
  private readonly free: RedisLink[];
  private readonly waiting: ((link: RedisLink) => void)[] = [];

  constructor(readonly links: readonly RedisLink[]) {
    this.free = [...links];
    // A link (re)connecting is one more a waiter can have (at start, the links connect one after the other).
    for (const link of links) link.onReady(() => this.handOver());
  }

  /** At least one link is connected (the store is available only then, as for its other connections). */
  anyReady(): boolean {
    return this.links.some((link) => link.isReady);
  }

  /**
   * Runs `use` on a connected link nobody else uses until it settles. Waits at most `timeoutMs` for one to be free,
   * then rejects with PoolExhausted having sent nothing: a write given up on is never sent later.
   */
  async lease<T>(timeoutMs: number, use: (link: RedisLink) => Promise<T>): Promise<T> {
    const link = await this.acquire(timeoutMs);
    try {
      return await use(link);
    } finally {
      this.release(link);
    }
  }

  private acquire(timeoutMs: number): Promise<RedisLink> {
    const link = this.takeReady();
    if (link !== undefined) return Promise.resolve(link);
    if (!this.anyReady()) return Promise.reject(new PoolNotConnected());
    return new Promise((resolve, reject) => {
      const take = (granted: RedisLink) => {
        clearTimeout(timer);
        resolve(granted);
      };
      const timer = setTimeout(() => {
        this.waiting.splice(this.waiting.indexOf(take), 1);
        reject(new PoolExhausted(timeoutMs));
      }, timeoutMs);
      this.waiting.push(take);
    });
  }

  private release(link: RedisLink): void {
    this.free.push(link);
    this.handOver();
  }

  /** Free connected links to the longest waiters. */
  private handOver(): void {
    while (this.waiting.length > 0) {
      const link = this.takeReady();
      if (link === undefined) return;
      this.waiting.shift()?.(link);
    }
  }

  private takeReady(): RedisLink | undefined {
    const index = this.free.findIndex((link) => link.isReady);
    return index < 0 ? undefined : this.free.splice(index, 1)[0];
  }
}
