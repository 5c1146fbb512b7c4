import { randomBytes } from 'node:crypto';
import type { Logger } from '../observability/log.js';
import type { StateStore } from './state-store.js';
import { isoTimestamp } from '../utc-time.js';

/** Where the epoch lives (scoped per account by the store, like every other key). */
export const STORE_EPOCH_KEY = 'store:epoch';
/** How often the epoch is read back while nothing else asks: a FLUSHALL leaves the connections as they were. */
export const EPOCH_CHECK_INTERVAL_MS = 2_000;
/**
 * Every key has a TTL; this one is pushed out at every check, so it expires only when no replica has run for this
 * long (a replica starting after that writes a new one, which is no wipe: there was nothing left to lose).
 */
const EPOCH_TTL_MS = 7 * 24 * 3_600_000;

export interface StoreEpochOptions {
  readonly log: Logger;
  /** Counted once per wipe this replica notices (signing_sidecar_state_store_wipes_total). */
  readonly onWiped: () => void;
  readonly intervalMs?: number;
}

/**
 * Notices a Redis that forgot its dataset (docs/fleet.md, "A Redis that comes back empty"): a primary without
 * persistence restarted before Sentinel failed it over comes back empty, and its replicas resynchronise to the empty
 * dataset; FLUSHALL does the same at once. Nothing in the connection tells: the client reconnects as after any blip.
 *
 * The epoch is a random id written once under the account's prefix and read back at start, whenever the store
 * becomes available again (a reconnect, a failover) and every EPOCH_CHECK_INTERVAL_MS. Missing or different from the
 * one this replica last saw means the dataset it wrote to is gone: logged at error level with what is lost, counted,
 * a new epoch written (or the one another replica wrote first taken), and the listeners told (the token record is
 * shared again, accepted postbacks appended again). A failover to a replica that holds the data keeps the epoch.
 */
export class StoreEpoch {
  private known: string | undefined;
  /** When the epoch was last found as known (ms since the epoch): the wipe happened after it. */
  private confirmedAtMs = 0;
  private checking: Promise<void> | undefined;
  private timer: NodeJS.Timeout | undefined;
  private stopped = false;
  private readonly listeners: Array<(epoch: string) => void> = [];

  constructor(
    private readonly store: Pick<StateStore, 'get' | 'setIfAbsent' | 'compareAndSet' | 'onAvailabilityChange'>,
    private readonly options: StoreEpochOptions,
  ) {}

  /** The epoch this replica last confirmed; undefined until the store first answered. */
  current(): string | undefined {
    return this.known;
  }

  /** Called with the new epoch after each wipe this replica notices. */
  onWipe(listener: (epoch: string) => void): void {
    this.listeners.push(listener);
  }

  start(): void {
    this.store.onAvailabilityChange((available) => {
      if (available) void this.check();
    });
    this.timer = setInterval(() => void this.check(), this.options.intervalMs ?? EPOCH_CHECK_INTERVAL_MS).unref();
    void this.check();
  }

  stop(): void {
    this.stopped = true;
    clearInterval(this.timer);
  }

  /** One read of the epoch (joined when one is under way); never rejects: a store away is asked again later. */
  check(): Promise<void> {
    this.checking ??= this.compare()
      .catch(() => undefined)
      .finally(() => (this.checking = undefined));
    return this.checking;
  }

  private async compare(): Promise<void> {
    if (this.stopped) return;
    const known = this.known;
    // Unchanged: one round trip, which also pushes the TTL out.
    if (known !== undefined && (await this.store.compareAndSet(STORE_EPOCH_KEY, known, known, EPOCH_TTL_MS))) {
      this.confirmedAtMs = Date.now();
      return;
    }
    const found = (await this.store.get(STORE_EPOCH_KEY)) ?? (await this.written());
    if (this.stopped || found === undefined || found === known) return;
    const lastConfirmedMs = this.confirmedAtMs;
    this.known = found;
    this.confirmedAtMs = Date.now();
    // At start a missing epoch is a new Redis or one wiped before this replica came: it held nothing there yet.
    if (known === undefined) return;
    this.options.onWiped();
    this.options.log.error(
      {
        event: 'state_store.wiped',
        // The wipe happened between these two moments.
        lastConfirmedAt: isoTimestamp(lastConfirmedMs),
        noticedAt: isoTimestamp(this.confirmedAtMs),
        lost: ['idempotency_keys', 'token_record', 'token_lock', 'postback_inbox', 'postback_memory'],
      },
      'the shared state store lost its dataset (a Redis restarted empty, or flushed): idempotency keys, the token ' +
        'record and queued postbacks are gone; what this replica still holds is shared and queued again ' +
        '(docs/runbooks.md#runbook-state-store-wiped)',
    );
    for (const listener of this.listeners) {
      try {
        listener(found);
      } catch {
        // One consumer's bug must not keep the others from acting on the wipe.
      }
    }
  }

  /** A new epoch, or the one another replica wrote between our read and our write. */
  private async written(): Promise<string | undefined> {
    const fresh = randomBytes(16).toString('hex');
    if (await this.store.setIfAbsent(STORE_EPOCH_KEY, fresh, EPOCH_TTL_MS)) return fresh;
    return this.store.get(STORE_EPOCH_KEY);
  }
}
