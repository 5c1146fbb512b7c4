import type { Client } from 'undici';
import type { RequestEnd } from './gateway-send.js';
import { upstreamErrors, type UpstreamError } from './upstream-errors.js';

export type Lease =
  | { readonly kind: 'lent'; readonly client: Client }
  | { readonly kind: 'refused'; readonly error: UpstreamError; readonly transient: boolean };

interface Waiter {
  readonly resolve: (lease: Lease) => void;
  readonly timer: NodeJS.Timeout;
}

/**
 * At most `limit` undici Clients (one keep-alive connection each), each lent to one request at a time. A request
 * that finds none free waits in order, for at most `deadlineMs`: then it is refused as not sent, so that the retry
 * loop signs it afresh rather than sending a signature that grew old in a queue (undici itself would queue it
 * without a deadline). Owning each connection's Client is what lets a request that got a stray answer destroy
 * exactly the connection that delivered it.
 */
export class ConnectionLender {
  private readonly clients = new Set<Client>();
  /** Clients made before the last renew(): lent ones are closed when returned instead of kept. */
  private readonly retired = new WeakSet<Client>();
  /** Most recently returned last: the next request takes the connection that has just answered. */
  private readonly idle: Client[] = [];
  private readonly waiting: Waiter[] = [];
  private readonly drained: Array<() => void> = [];
  private closing = false;

  constructor(
    private readonly limit: number,
    private readonly deadlineMs: number,
    private readonly newClient: () => Client,
  ) {}

  /** The request's `end` (its deadline) ends the wait early, as not sent. */
  acquire(end?: RequestEnd): Promise<Lease> {
    if (this.closing) return Promise.resolve(refused(upstreamErrors.closed('the gatewayClient is closing'), false));
    if (end?.ended) return Promise.resolve(refused(upstreamErrors.requestEnded(), false));
    const client = this.freeClient();
    if (client !== undefined) return Promise.resolve({ kind: 'lent', client });
    // A wait: only now is the request's signal needed.
    const signal = end?.signal;
    return new Promise<Lease>((resolve) => {
      const giveUp = (lease: Lease) => {
        this.waiting.splice(this.waiting.indexOf(waiter), 1);
        signal?.removeEventListener('abort', onAbort);
        resolve(lease);
        this.settleDrain();
      };
      const onAbort = () => {
        clearTimeout(waiter.timer);
        giveUp(refused(upstreamErrors.requestEnded(), false));
      };
      const waiter: Waiter = {
        resolve: (lease) => {
          signal?.removeEventListener('abort', onAbort);
          resolve(lease);
        },
        timer: setTimeout(() => giveUp(refused(upstreamErrors.poolTimeout(), true)), this.deadlineMs),
      };
      signal?.addEventListener('abort', onAbort, { once: true });
      this.waiting.push(waiter);
    });
  }

  /** Whether acquire() would lend a connection at once (or refuse at once): no wait. */
  lendsNow(): boolean {
    return this.closing || this.idle.length > 0 || this.clients.size < this.limit;
  }

  /** `healthy: false` destroys the connection; a new one is made when next needed. */
  release(client: Client, healthy: boolean): void {
    if (healthy && this.clients.has(client) && !this.retired.has(client)) this.idle.push(client);
    else if (healthy && this.retired.has(client)) this.retire(client);
    else this.discard(client);
    const waiter = this.waiting.shift();
    if (waiter !== undefined) {
      clearTimeout(waiter.timer);
      waiter.resolve({ kind: 'lent', client: this.freeClient() as Client });
    }
    this.settleDrain();
  }

  /**
   * Connections made from now on use the current connection settings (a rotated CA): idle ones are closed now,
   * lent ones when their request is done. No request in flight is cut.
   */
  renew(): void {
    for (const client of this.clients) this.retired.add(client);
    for (const client of this.idle.splice(0)) this.retire(client);
  }

  /** Refuses new requests and resolves once every lent and waiting one is done; then closes the connections. */
  async close(): Promise<void> {
    this.closing = true;
    await new Promise<void>((resolve) => {
      this.drained.push(resolve);
      this.settleDrain();
    });
    await Promise.all([...this.clients].map((client) => client.close()));
  }

  /** Refuses the waiting requests (never sent) and destroys every connection (requests in flight end there). */
  async destroy(): Promise<void> {
    this.closing = true;
    for (const waiter of this.waiting.splice(0)) {
      clearTimeout(waiter.timer);
      waiter.resolve(refused(upstreamErrors.closed('the gatewayClient was destroyed'), false));
    }
    await Promise.all([...this.clients].map((client) => client.destroy()));
  }

  private freeClient(): Client | undefined {
    const client = this.idle.pop();
    if (client !== undefined || this.clients.size >= this.limit) return client;
    const created = this.newClient();
    this.clients.add(created);
    return created;
  }

  private discard(client: Client): void {
    this.clients.delete(client);
    void client.destroy().catch(() => undefined);
  }

  /** Closes a healthy connection gracefully (nothing is in flight on it). */
  private retire(client: Client): void {
    this.clients.delete(client);
    void client.close().catch(() => undefined);
  }

  private settleDrain(): void {
    if (this.idle.length < this.clients.size || this.waiting.length > 0) return;
    for (const resolve of this.drained.splice(0)) resolve();
  }
}

function refused(error: UpstreamError, transient: boolean): Lease {
  return { kind: 'refused', error, transient };
}
