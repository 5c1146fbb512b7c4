import type { Logger } from '../observability/log.js';

type Phase = 'starting' | 'up' | 'down';

/**
 * A store that flaps (Redis answering reads but refusing writes when out of memory: each failure marks it down,
 * each answer up) would log two lines a second. A `down` less than this long after the last `up` starts a quiet
 * cycle: its `down` and `up` lines go at debug level. The gauge, the alert and the listeners follow every change.
 */
const FLAP_QUIET_MS = 60_000;

/**
 * Whether the shared store answers, as the callers see it. Starts unknown (connecting in the background), then
 * flips between up and down. Each flip is logged once, at warn when the store goes away and at info when it comes
 * back, with the reason of the first failure: a Redis outage of an hour is two log lines, not one per request.
 * Listeners hear only real changes of isAvailable(); one that throws is logged and never stops the others.
 */
export class StoreAvailability {
  private phase: Phase = 'starting';
  private reason: string | undefined;
  private lastUpAt = Number.NEGATIVE_INFINITY;
  private quietCycle = false;
  private closed = false;
  private readonly listeners: Array<(available: boolean) => void> = [];
  /** Woken on up; those marked `settle` also on down. */
  private readonly waiters = new Map<() => void, { readonly settle: boolean }>();

  constructor(
    private readonly log: Logger | undefined,
    private readonly store: string,
  ) {}

  get available(): boolean {
    return this.phase === 'up';
  }

  /** Why the store is down (the first failure of this outage); undefined while up or still starting. */
  get downReason(): string | undefined {
    return this.phase === 'down' ? this.reason : undefined;
  }

  onChange(listener: (available: boolean) => void): void {
    this.listeners.push(listener);
  }

  up(): void {
    if (this.phase === 'up') return;
    const wasDown = this.phase === 'down';
    this.phase = 'up';
    if (wasDown) this.lastUpAt = Date.now();
    this.log?.[this.quietCycle ? 'debug' : 'info'](
      { event: wasDown ? 'state_store.up' : 'state_store.connected', store: this.store },
      `shared state store ${this.store} available`,
    );
    for (const wake of this.waiters.keys()) wake();
    this.notify(true);
  }

  /** `reason` names the failure (a Redis error code, "timeout after 100 ms", a connection error): never a value. */
  down(reason: string): void {
    if (this.phase === 'down') return;
    const wasUp = this.phase === 'up';
    this.phase = 'down';
    this.reason = reason;
    this.quietCycle = Date.now() - this.lastUpAt < FLAP_QUIET_MS;
    this.log?.[this.quietCycle ? 'debug' : 'warn'](
      { event: 'state_store.down', store: this.store, reason },
      `shared state store ${this.store} unavailable: ${reason}`,
    );
    for (const [wake, { settle }] of this.waiters) if (settle) wake();
    if (wasUp) this.notify(false);
  }

  /** The store is closed: every wait ends, and none starts. */
  close(): void {
    this.closed = true;
    for (const wake of this.waiters.keys()) wake();
  }

  /**
   * Resolves true once available, false when `timeoutMs` passes first, `signal` aborts or the store is closed; with
   * `settle`, also false at the first failure (`check`: a refused connection is known at once, no need to wait out
   * the timeout).
   */
  async whenAvailable(timeoutMs: number, settle = false, signal?: AbortSignal): Promise<boolean> {
    const aborted = (): boolean => signal?.aborted ?? false;
    if (this.closed || aborted()) return false;
    if (this.available) return true;
    if (settle && this.phase === 'down') return false;
    let wake: (() => void) | undefined;
    let timer: NodeJS.Timeout | undefined;
    const woken = new Promise<void>((resolve) => {
      wake = resolve;
      timer = setTimeout(resolve, timeoutMs);
    });
    this.waiters.set(wake!, { settle });
    signal?.addEventListener('abort', wake!, { once: true });
    try {
      await woken;
    } finally {
      clearTimeout(timer);
      this.waiters.delete(wake!);
      signal?.removeEventListener('abort', wake!);
    }
    return !this.closed && !aborted() && this.available;
  }

  private notify(available: boolean): void {
    for (const listener of this.listeners) {
      try {
        listener(available);
      } catch (err) {
        this.log?.error(
          { event: 'state_store.listener_error', store: this.store, error: (err as Error).name },
          'availability listener threw',
        );
      }
    }
  }
}
