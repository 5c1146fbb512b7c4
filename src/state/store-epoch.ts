import { randomBytes } from 'node:crypto';
import type { Logger } from '../observability/log.js';
import { isoTimestamp } from '../time/utc-time.js';
import { LUA_CONTENT, RedisScript, stringsOf } from './redis-scripts.js';
import type { RedisStateStore } from './redis-store.js';

/** Where the epoch lives (scoped per account by the store, like every other key). */
export const STORE_EPOCH_KEY = 'store:epoch';
/** A counter every replica raises at each check: a dataset that goes back to an older copy takes it back too. */
export const STORE_GENERATION_KEY = 'store:generation';
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
 * What raising the generation found: `other` (not the epoch known), else the generation raised, `rolled_back` when it
 * is no higher than one already seen.
 */
type Raised = { readonly found: 'other' } | { readonly found: 'raised' | 'rolled_back'; readonly generation: number };

/**
 * Raises the generation under the epoch known: {0} when the epoch is not the one known; else the generation raised by
 * one, and {1, it}; or, when that would be no higher than `seen`, {2, it} with nothing written: the dataset went back
 * to an older copy of itself (read as Raised). A raise pushes both keys out by `ttlMs`. GET and SET only: the commands
 * docs/fleet.md's ACL already allows. The epoch is sealed like every record (compared here by its content, written
 * back as found); the generation is a bare counter, the one record not sealed: earlier versions raise it with their
 * own copy of this script during a rolling upgrade, and a forged one (anything but a number reads as 0) can only make
 * the replicas declare a rollback, as deleting the epoch would make them declare a wipe (docs/security.md).
 */
const RAISE_GENERATION = new RedisScript({
  command: 'epoch_check',
  source: `${LUA_CONTENT}local found = redis.call('GET', KEYS[1])
if content(found) ~= ARGV[1] then return {0} end
local generation = (tonumber(redis.call('GET', KEYS[2]) or '0') or 0) + 1
if generation <= tonumber(ARGV[2]) then return {2, tostring(generation)} end
redis.call('SET', KEYS[1], found, 'PX', ARGV[3])
redis.call('SET', KEYS[2], tostring(generation), 'PX', ARGV[3])
return {1, tostring(generation)}`,
  keys: (k: { readonly epoch: string; readonly generation: string }) => [k.epoch, k.generation],
  args: (a: { readonly known: string; readonly seen: number; readonly ttlMs: number }) => [a.known, a.seen, a.ttlMs],
  reply: (raw): Raised => {
    const [status, value] = stringsOf(raw);
    if (status === '0' || value === undefined) return { found: 'other' };
    return { found: status === '2' ? 'rolled_back' : 'raised', generation: Number(value) };
  },
  // Only a raise writes. A rollback found writes nothing and is not waited for: right after one the replicas are
  // still resynchronising, a WAIT would fail, and every refused raise would lift the counter back past what was seen.
  wrote: (raised) => raised.found === 'raised',
});

/** Why the dataset this replica wrote to is gone: it came back empty (or another replica found it so), or older. */
type Loss = 'replaced' | 'rolled_back';

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
 *
 * A dataset that goes back to an older copy of itself keeps the epoch: a node restarted from an older snapshot (RDB,
 * Redis's default persistence) and promoted once every node with the newer writes is gone. Each check also raises a
 * generation counter beside the epoch, acknowledged like a money write; one that would come back no higher than this
 * replica has already seen acknowledged means acknowledged writes since were lost: it is not written (nor waited
 * for), and the replica replaces the epoch with a new one (the others then notice a wipe) and acts as on a wipe. A copy taken after this replica's last check is no lower than what it saw, and passes; the requeue
 * memory then still finds its postbacks missing (requeue-memory.ts), and only idempotency keys written since that
 * check are lost, as in a failover (docs/fleet.md).
 */
export class StoreEpoch {
  private known: string | undefined;
  /** The highest generation this replica has seen under the epoch it knows. */
  private generation = 0;
  /** When the epoch was last found as known (ms since the epoch): the wipe happened after it. */
  private confirmedAtMs = 0;
  private checking: Promise<void> | undefined;
  private timer: NodeJS.Timeout | undefined;
  private stopped = false;
  private readonly listeners: Array<(epoch: string) => void> = [];

  constructor(
    private readonly store: Pick<
      RedisStateStore,
      'get' | 'setIfAbsent' | 'compareAndSet' | 'runScript' | 'onAvailabilityChange'
    >,
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
    let loss: Loss = 'replaced';
    if (known !== undefined) {
      // Unchanged: one round trip, which also pushes the TTL out.
      const raised = await this.raiseGeneration(known);
      if (raised === 'raised') {
        this.confirmedAtMs = Date.now();
        return;
      }
      if (raised === 'rolled_back') {
        loss = 'rolled_back';
        // Replaced for every replica, which then notices a wipe too; or taken from the one that replaced it first.
        await this.store.compareAndSet(STORE_EPOCH_KEY, known, randomBytes(16).toString('hex'), EPOCH_TTL_MS);
      }
    }
    const found = (await this.store.get(STORE_EPOCH_KEY)) ?? (await this.written());
    if (this.stopped || found === undefined || found === known) return;
    const lastConfirmedMs = this.confirmedAtMs;
    this.known = found;
    this.generation = 0;
    this.confirmedAtMs = Date.now();
    // Seen once under the new epoch at once: a copy older than this moment is then noticed.
    await this.raiseGeneration(found).catch(() => undefined);
    // At start a missing epoch is a new Redis or one wiped before this replica came: it held nothing there yet.
    if (known === undefined) return;
    this.options.onWiped();
    this.options.log.error(
      {
        event: 'state_store.wiped',
        loss,
        // The wipe happened between these two moments.
        lastConfirmedAt: isoTimestamp(lastConfirmedMs),
        noticedAt: isoTimestamp(this.confirmedAtMs),
        lost: ['idempotency_keys', 'token_record', 'token_lock', 'postback_inbox', 'postback_memory'],
      },
      (loss === 'rolled_back'
        ? 'the shared state store went back to an older copy of its dataset (a Redis restarted from an older snapshot): '
        : 'the shared state store lost its dataset (a Redis restarted empty, or flushed): ') +
        'idempotency keys, the token record and queued postbacks written since are gone; what this replica still ' +
        'holds is shared and queued again (docs/runbooks.md#runbook-state-store-wiped)',
    );
    for (const listener of this.listeners) {
      try {
        listener(found);
      } catch {
        // One consumer's bug must not keep the others from acting on the wipe.
      }
    }
  }

  /** Raises the generation under `epoch`: `raised`, `rolled_back` (no higher than seen), or `other` (not the epoch). */
  private async raiseGeneration(epoch: string): Promise<'raised' | 'rolled_back' | 'other'> {
    const raised = await this.store.runScript(
      RAISE_GENERATION,
      {
        keys: { epoch: STORE_EPOCH_KEY, generation: STORE_GENERATION_KEY },
        args: { known: epoch, seen: this.generation, ttlMs: EPOCH_TTL_MS },
      },
      // Seen only once the replicas hold it: a failover to a replica after a partition loses what the cut-off
      // primary took unacknowledged, which is no rollback of anything the fleet relies on.
      { acknowledged: true },
    );
    if (raised.found === 'other') return 'other';
    this.generation = Math.max(this.generation, raised.generation);
    return raised.found;
  }

  /** A new epoch, or the one another replica wrote between our read and our write. */
  private async written(): Promise<string | undefined> {
    const fresh = randomBytes(16).toString('hex');
    if (await this.store.setIfAbsent(STORE_EPOCH_KEY, fresh, EPOCH_TTL_MS)) return fresh;
    return this.store.get(STORE_EPOCH_KEY);
  }
}
