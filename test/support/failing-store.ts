import { setTimeout as sleep } from 'node:timers/promises';
import {
  StateStoreUnavailableError,
  type Condition,
  type ReadRecord,
  type StateStore,
  type Write,
  type WriteOptions,
} from '../../src/state/state-store.js';

/**
 * A real store behind a switch: while `down` is true every command rejects with StateStoreUnavailableError, as a
 * Redis store does past its command timeout. `calls` counts the commands that reached the switch.
 */
export class SwitchableStore implements StateStore {
  down = false;
  /**
   * The next setIfAbsent or writeIf (a claim) is applied, but its caller is told the store timed out (a reply lost
   * on the way back).
   */
  loseNextSetReply = false;
  calls = 0;

  constructor(private readonly inner: StateStore) {}

  get kind(): StateStore['kind'] {
    return this.inner.kind;
  }

  get(key: string): Promise<string | undefined> {
    return this.pass(() => this.inner.get(key));
  }

  read(key: string): Promise<ReadRecord> {
    return this.pass(() => this.inner.read(key));
  }

  setIfAbsent(key: string, value: string, ttlMs: number): Promise<boolean> {
    return this.pass(async () => {
      const stored = await this.inner.setIfAbsent(key, value, ttlMs);
      if (!this.loseNextSetReply) return stored;
      this.loseNextSetReply = false;
      throw new StateStoreUnavailableError('reply lost by the test (the command was applied)');
    });
  }

  compareAndSet(key: string, expected: string | undefined, value: string, ttlMs: number): Promise<boolean> {
    return this.pass(() => this.inner.compareAndSet(key, expected, value, ttlMs));
  }

  writeIf(conditions: readonly Condition[], writes: readonly Write[], options?: WriteOptions): Promise<boolean> {
    return this.pass(async () => {
      const stored = await this.inner.writeIf(conditions, writes, options);
      if (!this.loseNextSetReply) return stored;
      this.loseNextSetReply = false;
      throw new StateStoreUnavailableError('reply lost by the test (the command was applied)');
    });
  }

  compareAndDelete(key: string, expected: string): Promise<boolean> {
    return this.pass(() => this.inner.compareAndDelete(key, expected));
  }

  publish(channel: string, message: string): Promise<void> {
    return this.pass(() => this.inner.publish(channel, message));
  }

  subscribe(channel: string, listener: (message: string) => void): Promise<() => Promise<void>> {
    return this.pass(() => this.inner.subscribe(channel, listener));
  }

  isAvailable(): boolean {
    return !this.down && this.inner.isAvailable();
  }

  onAvailabilityChange(listener: (available: boolean) => void): void {
    this.inner.onAvailabilityChange(listener);
  }

  /** Switched off, it is a store that failed: false at once with `settle`, else once switched on or at the timeout. */
  async whenAvailable(timeoutMs: number, settle?: boolean, signal?: AbortSignal): Promise<boolean> {
    const until = Date.now() + timeoutMs;
    while (this.down) {
      if (settle === true || signal?.aborted === true || Date.now() >= until) return false;
      await sleep(10);
    }
    return this.inner.whenAvailable(Math.max(0, until - Date.now()), settle, signal);
  }

  close(): Promise<void> {
    return this.inner.close();
  }

  private pass<T>(run: () => Promise<T>): Promise<T> {
    this.calls++;
    if (this.down) return Promise.reject(new StateStoreUnavailableError('store switched off by the test'));
    return run();
  }
}
