// What a replica answered `200 accepted` for and has not yet seen settled, held in its own memory, so that a Redis
// that comes back empty or older (docs/fleet.md, "A Redis that comes back empty") does not lose it: after a wipe, or
// once a lookup finds it neither kept nor settled, it is appended to the inbox again, with the same postback id, so
// the application's deduplication on X-Postback-Id holds. A replica that is killed takes its share with it; that is
// lost only if Redis loses it too.
import type { Logger } from '../observability/log.js';
import type { InboxMetrics } from '../observability/postback-metrics.js';
import type { RedisStateStore } from '../state/redis-store.js';
import { LUA_CONTENT, RedisScript } from '../state/redis-scripts.js';
import { STORE_EPOCH_KEY, type StoreEpoch } from '../state/store-epoch.js';
import { ENTRY_PREFIX, SETTLED_OUTCOMES, SETTLED_PREFIX, type NewPostback, type PostbackInbox } from './inbox.js';

/** How often the postbacks held are looked up in Redis: those delivered (or dropped) since are let go. */
const LOOKUP_INTERVAL_MS = 5_000;
/**
 * After a wipe, a re-append that fails (Redis still coming back, the replicas resynchronising) is tried again after
 * this, doubling up to REAPPEND_RETRY_MAX_MS: until it succeeds, what it holds may be only here, or on a primary
 * whose replicas do not have it yet.
 */
const REAPPEND_RETRY_FIRST_MS = 100;
const REAPPEND_RETRY_MAX_MS = 1_000;
/** Postbacks looked up per script: a short script, so Redis never waits long on it. */
const LOOKUP_BATCH = 500;
/** Per postback besides its payload and headers: the id, the line's name, the map entry (an estimate). */
const ENTRY_OVERHEAD_BYTES = 256;
/** At most one line a minute about postbacks let go for lack of room (each is counted). */
const DROP_LOG_INTERVAL_MS = 60_000;

/** What a lookup found of one postback: its entry, its settled mark as stored, or neither. */
type Found =
  { readonly found: 'kept' } | { readonly found: 'settled'; readonly mark: string } | { readonly found: 'lost' };

/**
 * Undefined when the epoch is not the one expected (the dataset was wiped, or replaced), else per id `kept` while its
 * entry is (undelivered or dead), its settled mark as stored once settled (delivered or dropped; checked by the
 * caller, a script cannot check a MAC), `lost` when neither is there (a rollback to an older copy of the dataset, a
 * failover that lost acknowledged writes), never read as delivered. One script, so that all three are read in the
 * dataset the epoch names. The entry and mark keys are built from `scope`, the stored key prefix: the account's, same
 * slot.
 */
const STILL_KEPT = new RedisScript({
  command: 'inbox_status',
  source: `${LUA_CONTENT}if content(redis.call('GET', KEYS[1])) ~= ARGV[2] then return -1 end
local found = {}
for i = 5, #ARGV do
  if redis.call('EXISTS', ARGV[1] .. ARGV[3] .. ARGV[i]) == 1 then found[#found + 1] = 1
  else found[#found + 1] = redis.call('GET', ARGV[1] .. ARGV[4] .. ARGV[i]) or 0 end
end
return found`,
  keys: ({ epoch }: { readonly epoch: string }) => [epoch],
  args: (a: {
    readonly scope: string;
    readonly epoch: string;
    readonly entryPrefix: string;
    readonly settledPrefix: string;
    readonly ids: readonly string[];
  }) => [a.scope, a.epoch, a.entryPrefix, a.settledPrefix, ...a.ids],
  reply: (raw): Found[] | undefined =>
    Array.isArray(raw)
      ? raw.map((found: unknown): Found => {
          if (typeof found === 'string') return { found: 'settled', mark: found };
          return Number(found) === 1 ? { found: 'kept' } : { found: 'lost' };
        })
      : undefined,
});

interface Held {
  readonly postback: NewPostback;
  readonly receivedMs: number;
  readonly bytes: number;
  /** The epoch the inbox had when this replica last appended it (undefined: not known yet). */
  epoch: string | undefined;
  /** A lookup found neither its entry nor its settled mark: to be appended again, in this epoch too. */
  missing?: boolean;
  /** The epoch in which this replica wrote it again after a wipe, until the replicas acknowledge it. */
  writtenIn?: string;
}

export interface RequeueMemoryOptions {
  readonly maxBytes: number;
  readonly metrics: InboxMetrics;
  readonly log: Logger;
}

/**
 * Holds accepted postbacks (in arrival order, within maxBytes: the oldest go first, counted) until a lookup finds
 * them settled (delivered or dropped: a mark the inbox writes in the same step) under the same epoch, or this
 * replica's own delivery records them delivered. Absence is never taken for delivery: a postback neither kept nor
 * settled was lost (the dataset went back to an older copy) and is appended again. On a wipe it
 * appends again every postback held that was appended under an older epoch, oldest first, so that one
 * transaction's postbacks held here keep their order among themselves (one accepted meanwhile may come before them);
 * when that fails, it is tried again shortly (backing off up to a second), and at every lookup.
 */
export class RequeueMemory {
  private readonly held = new Map<string, Held>();
  private bytes = 0;
  private timer: NodeJS.Timeout | undefined;
  private retry: NodeJS.Timeout | undefined;
  /** The latest wipe's re-append chain: an older chain's retries stop once a newer wipe starts its own. */
  private chain = 0;
  private stopped = false;
  private busy: Promise<void> | undefined;
  private droppedSinceLog = 0;
  private lastDropLogMs = Number.NEGATIVE_INFINITY;

  constructor(
    private readonly inbox: PostbackInbox,
    private readonly store: RedisStateStore,
    private readonly epoch: Pick<StoreEpoch, 'current' | 'onWipe' | 'check'>,
    private readonly options: RequeueMemoryOptions,
  ) {}

  /**
   * The inbox as the receiver and the delivery worker use it: what its append accepts (or finds kept already) is
   * held here too, and what this replica's own delivery records as delivered is let go at once.
   */
  wrap(): PostbackInbox {
    const { inbox } = this;
    return {
      prepare: () => inbox.prepare(),
      appendAgain: (postback, receivedMs) => inbox.appendAgain(postback, receivedMs),
      acknowledgeAppended: (nowMs) => inbox.acknowledgeAppended(nowMs),
      read: (consumer, count, nowMs) => inbox.read(consumer, count, nowMs),
      recover: (consumer, count, nowMs, delivering) => inbox.recover(consumer, count, nowMs, delivering),
      claimStale: (consumer, minIdleMs, count, nowMs) => inbox.claimStale(consumer, minIdleMs, count, nowMs),
      releaseDue: (nowMs, count) => inbox.releaseDue(nowMs, count),
      status: () => inbox.status(),
      list: (which, offset, limit) => inbox.list(which, offset, limit),
      show: (id) => inbox.show(id),
      replay: (id, where) => inbox.replay(id, where),
      drop: (id) => inbox.drop(id),
      append: async (postback, nowMs) => {
        const epoch = this.epoch.current();
        const appended = await inbox.append(postback, nowMs);
        this.hold(postback, nowMs, epoch);
        return appended;
      },
      record: async (postback, deliveryOutcome, nowMs) => {
        const recorded = await inbox.record(postback, deliveryOutcome, nowMs);
        if (recorded && deliveryOutcome.outcome === 'delivered') this.forget(postback.id);
        return recorded;
      },
    };
  }

  start(): void {
    this.epoch.onWipe(() => this.appendAgainUntilDone(++this.chain, REAPPEND_RETRY_FIRST_MS));
    this.timer = setInterval(() => void this.runAlone(() => this.lookUp()), LOOKUP_INTERVAL_MS).unref();
  }

  stop(): void {
    this.stopped = true;
    clearInterval(this.timer);
    clearTimeout(this.retry);
  }

  /** How many postbacks, and bytes, are held now. */
  size(): { readonly postbacks: number; readonly bytes: number } {
    return { postbacks: this.held.size, bytes: this.bytes };
  }

  /** One lookup now (tests; the interval's own). */
  lookUpNow(): Promise<void> {
    return this.runAlone(() => this.lookUp());
  }

  private hold(postback: NewPostback, receivedMs: number, epoch: string | undefined): void {
    if (this.options.maxBytes <= 0 || this.held.has(postback.id)) return;
    const bytes =
      Buffer.byteLength(postback.payload) + Buffer.byteLength(JSON.stringify(postback.headers)) + ENTRY_OVERHEAD_BYTES;
    this.held.set(postback.id, { postback, receivedMs, bytes, epoch });
    this.bytes += bytes;
    let dropped = 0;
    for (const [id, oldest] of this.held) {
      if (this.bytes <= this.options.maxBytes) break;
      this.held.delete(id);
      this.bytes -= oldest.bytes;
      dropped++;
    }
    if (dropped > 0) this.dropped(dropped);
  }

  private forget(id: string): void {
    const entry = this.held.get(id);
    if (entry === undefined) return;
    this.held.delete(id);
    this.bytes -= entry.bytes;
  }

  private dropped(count: number): void {
    this.options.metrics.requeueDropped(count);
    this.droppedSinceLog += count;
    const now = Date.now();
    if (now - this.lastDropLogMs < DROP_LOG_INTERVAL_MS) return;
    this.lastDropLogMs = now;
    this.options.log.warn(
      { event: 'postback.requeue_memory_full', dropped: this.droppedSinceLog, maxBytes: this.options.maxBytes },
      'accepted postbacks no longer held for a Redis wipe (oldest first): raise SIDECAR_POSTBACK_REQUEUE_MEMORY_MB',
    );
    this.droppedSinceLog = 0;
  }

  /** One lookup or re-append at a time: they read and change the same entries. */
  private runAlone(work: () => Promise<void>): Promise<void> {
    const previous = this.busy ?? Promise.resolve();
    const next = previous.then(work).catch(() => undefined);
    this.busy = next;
    void next.finally(() => {
      if (this.busy === next) this.busy = undefined;
    });
    return next;
  }

  /**
   * Lets go of what the inbox has settled (delivered or dropped) under the epoch it was appended in; appends again
   * what was appended under another one (a wipe whose re-append failed), and what the inbox no longer has at all.
   */
  private async lookUp(): Promise<void> {
    const current = this.epoch.current();
    if (current === undefined || this.held.size === 0) return;
    // Accepted before the epoch was first read: taken as appended under it, as that first read takes the store (an
    // append again could deliver twice what was delivered meanwhile).
    for (const entry of this.held.values()) entry.epoch ??= current;
    if ([...this.held.values()].some((entry) => this.behind(entry, current))) await this.appendAgain();
    const ids = [...this.held.values()].filter((entry) => entry.epoch === current).map(({ postback }) => postback.id);
    let missing = 0;
    for (let from = 0; from < ids.length; from += LOOKUP_BATCH) {
      const batch = ids.slice(from, from + LOOKUP_BATCH);
      const reply = await this.store.runScript(STILL_KEPT, {
        keys: { epoch: STORE_EPOCH_KEY },
        args: {
          scope: this.store.storedKey(''),
          epoch: current,
          entryPrefix: ENTRY_PREFIX,
          settledPrefix: SETTLED_PREFIX,
          ids: batch,
        },
      });
      if (reply === undefined) {
        // Not the epoch this replica knows: a wipe it has not noticed yet. The check notices it, and appends again.
        await this.epoch.check();
        return;
      }
      batch.forEach((id, i) => {
        const entry = this.held.get(id);
        if (entry?.epoch !== current) return;
        const found = reply[i];
        if (found?.found === 'settled' && this.settled(id, found.mark)) this.forget(id);
        else if (found?.found !== 'kept') {
          // Written again even if it was written in this epoch already: that copy is gone too.
          entry.missing = true;
          entry.writtenIn = undefined;
          missing++;
        }
      });
    }
    if (missing === 0) return;
    this.options.log.error(
      { event: 'postback.inbox_lost', postbacks: missing, held: this.held.size },
      'accepted postbacks gone from the inbox without being delivered (the state store went back to an older copy, ' +
        'or lost acknowledged writes): appending them again from this replica (docs/runbooks.md#runbook-state-store-wiped)',
    );
    await this.appendAgain();
  }

  /** A settled mark as stored: genuine (its MAC opens) and one of the inbox's outcomes. A forged one lets nothing go. */
  private settled(id: string, stored: string): boolean {
    const opened = this.store.mac.open(`${SETTLED_PREFIX}${id}`, stored);
    return 'content' in opened && (SETTLED_OUTCOMES as readonly string[]).includes(opened.content);
  }

  /** To be appended again: under another epoch than the current one, or found missing in it. */
  private behind(entry: Held, epoch: string): boolean {
    return entry.epoch !== epoch || entry.missing === true;
  }

  /** Appends again now and, while an append fails, after `retryMs`, doubling; only the latest wipe's chain goes on. */
  private appendAgainUntilDone(chain: number, retryMs: number): void {
    // A timer of an older chain, or one left at stop(), finds itself no longer current and does nothing.
    const current = (): boolean => chain === this.chain && !this.stopped;
    if (!current()) return;
    void this.runAlone(async () => {
      if (!current()) return;
      try {
        await this.appendAgain();
      } catch (err) {
        if (!current()) return;
        // Once a chain: until the append succeeds (postback.requeued), these may be held only here.
        if (retryMs === REAPPEND_RETRY_FIRST_MS) {
          const reason = err instanceof Error ? err.message : 'error';
          this.options.log.warn(
            { event: 'postback.requeue_retrying', held: this.held.size, err: reason },
            'accepted postbacks not yet appended again after the state store lost them; trying again',
          );
        }
        const next = Math.min(retryMs * 2, REAPPEND_RETRY_MAX_MS);
        this.retry = setTimeout(() => this.appendAgainUntilDone(chain, next), retryMs).unref();
      }
    });
  }

  /**
   * Appends again, oldest first, every postback held that the current epoch's inbox has not had from here: written
   * to the primary without waiting for the replicas, then acknowledged once for all. A Redis that comes back empty
   * has replicas to resynchronise, and until they have, every acknowledgement fails: one per postback, none after the
   * first would reach the primary meanwhile, and this replica's death would lose them. A postback written already in
   * this epoch is not written again when only its acknowledgement failed: another replica may have delivered it
   * since, and it would be delivered twice.
   */
  private async appendAgain(): Promise<void> {
    const epoch = this.epoch.current();
    if (epoch === undefined) return;
    const behind = (entry: Held): boolean => this.behind(entry, epoch);
    if (![...this.held.values()].some(behind)) return;
    for (const entry of [...this.held.values()]) {
      if (!behind(entry) || entry.writtenIn === epoch || !this.held.has(entry.postback.id)) continue;
      await this.inbox.appendAgain(entry.postback, entry.receivedMs);
      entry.writtenIn = epoch;
    }
    await this.inbox.acknowledgeAppended(Date.now());
    let requeued = 0;
    for (const entry of this.held.values()) {
      if (!behind(entry) || entry.writtenIn !== epoch) continue;
      entry.epoch = epoch;
      entry.missing = false;
      requeued++;
    }
    if (requeued === 0) return;
    this.options.metrics.requeued(requeued);
    this.options.log.warn(
      { event: 'postback.requeued', postbacks: requeued, held: this.held.size },
      'accepted postbacks appended to the inbox again after the state store lost them',
    );
  }
}
