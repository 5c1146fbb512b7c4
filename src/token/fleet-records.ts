import type { StateStore } from '../state/state-store.js';
import type { FleetLock } from './fleet-lock.js';
import {
  TOKEN_RECORD_KEY,
  decodeRecord,
  encodeRecord,
  recordTtlMs,
  type SharedTokenRecord,
  type StoredRecord,
} from './shared-token-record.js';
import { EXPIRY_MARGIN_MS } from './token-set.js';

export interface FleetReporter {
  tokenLockWait(seconds: number): void;
  tokenAdopted(): void;
}

/** adopted: another replica's record; written: ours, in the store; unwritten: ours, the store would not take it. */
export interface Acquired {
  readonly record: SharedTokenRecord;
  readonly via: 'adopted' | 'written' | 'unwritten';
}

/**
 * The fleet's token record on the store: read with its exact text, written only over the text that was read
 * (compare-and-set) and announced, and another replica's record taken into use (adopted, counted).
 */
export class FleetRecords {
  constructor(
    private readonly store: StateStore,
    private readonly lock: FleetLock,
    private readonly reporter: FleetReporter,
    /** The gateway's time as this replica best knows it (ms): the record's expiries are on the gateway's clock. */
    readonly gatewayNow: () => number,
  ) {}

  async read(): Promise<StoredRecord> {
    const raw = await this.store.get(TOKEN_RECORD_KEY);
    return { raw, record: decodeRecord(raw) };
  }

  /** The access token can still be used for a while, by the gateway's clock (with the manager's margin). */
  accessUsable(record: SharedTokenRecord): boolean {
    return this.gatewayNow() < record.accessExpiresAtMs - EXPIRY_MARGIN_MS;
  }

  /**
   * Writes only over the record it read. When that fails, a holder whose lock expired meanwhile wrote a newer
   * record: it stands, and this replica adopts it; ours is kept for this replica alone only when theirs is dead.
   * Tokens already granted are never lost to a store that went away: they are returned unwritten.
   */
  async write(expected: string | undefined, record: SharedTokenRecord): Promise<Acquired> {
    let current: StoredRecord;
    try {
      if (await this.compareAndSet(expected, encodeRecord(record), record)) {
        await this.lock.announce(record.generation);
        return { record, via: 'written' };
      }
      current = await this.read();
    } catch {
      return { record, via: 'unwritten' };
    }
    const theirs = current.record;
    if (theirs && theirs.generation >= record.generation && this.accessUsable(theirs)) {
      return this.adopted(theirs, undefined);
    }
    return { record, via: 'unwritten' };
  }

  compareAndSet(expected: string | undefined, raw: string, record: SharedTokenRecord): Promise<boolean> {
    return this.store.compareAndSet(TOKEN_RECORD_KEY, expected, raw, recordTtlMs(record, this.gatewayNow()));
  }

  adopted(record: SharedTokenRecord, waitingSince: number | undefined): Acquired {
    this.waited(waitingSince);
    this.reporter.tokenAdopted();
    return { record, via: 'adopted' };
  }

  waited(since: number | undefined): void {
    if (since !== undefined) this.reporter.tokenLockWait((performance.now() - since) / 1000);
  }
}
