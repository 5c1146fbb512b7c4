// The durable postback inbox (`queued` delivery, docs/postbacks.md) on Redis, under the account's hash tag:
//   postback:entry:<id>    a hash per postback: payload, headers, its line, arrival, attempts, last error
//   postback:order:<key>   a list per transaction: its postbacks' ids in arrival order (its "line")
//   postback:inbox         the stream of postbacks to deliver now, read by the consumer group `sidecar-delivery`
//   postback:retry         a sorted set: postbacks waiting for their next attempt, by its time
//   postback:pending       a sorted set: every postback not yet delivered nor dead, by arrival (backlog, age)
//   postback:dead          a sorted set: postbacks whose every attempt failed, by the time of the last
//   postback:settled:<id>  a postback delivered or dropped, for an hour: what lets a replica forget its own copy
// Each move is one script (inbox-scripts.ts). Delivery is at least once: a replica that dies while it holds a
// postback leaves it pending in the group, and another replica takes it over; X-Postback-Id lets the application
// see a second delivery.
import { createHash } from 'node:crypto';
import type { RecordMac } from '../state/record-mac.js';
import type { RedisStateStore, StreamEntry } from '../state/redis-store.js';
import {
  APPEND,
  DROP,
  INSPECT,
  MARK_WRITTEN,
  parseHeaders,
  RELEASE_DUE,
  REPLAY,
  RECORD_OUTCOME,
  STATUS,
  TAKE,
  type InspectedPostback,
  type PostbackKeys,
} from './inbox-scripts.js';

const STREAM = 'postback:inbox';
const RETRY = 'postback:retry';
const PENDING = 'postback:pending';
const DEAD = 'postback:dead';
/** Written to acknowledge postbacks appended again without waiting (MARK_WRITTEN); gone a minute later. */
const REQUEUE_MARK = 'postback:requeue-mark';
const REQUEUE_MARK_TTL_MS = 60_000;
export const DELIVERY_GROUP = 'sidecar-delivery';

/** Short key names of one postback's entry and of its settled mark: the id follows. */
export const ENTRY_PREFIX = 'postback:entry:';
export const SETTLED_PREFIX = 'postback:settled:';
/**
 * How long a settled mark stays. A replica holding a copy of the postback (requeue-memory.ts) looks it up every few
 * seconds; one that could not look for longer than this (cut off from Redis for an hour) finds neither entry nor mark
 * and appends its copy again: delivered twice, under one X-Postback-Id, rather than lost.
 */
export const SETTLED_MARK_TTL_MS = 3_600_000;

const entryKey = (id: string): string => `${ENTRY_PREFIX}${id}`;
const settledKey = (id: string): string => `${SETTLED_PREFIX}${id}`;
/** What a settled mark holds (sealed like every record): how the postback left the inbox. */
export const SETTLED_OUTCOMES = ['delivered', 'dropped'] as const;

/** `pb_` and 32 hex digits of the payload's SHA-256: the same postback delivered again by the gateway has the same id. */
export const POSTBACK_ID = /^pb_[0-9a-f]{32}$/;

export function postbackIdOf(payloadDigest: string): string {
  return `pb_${payloadDigest.slice(0, 32)}`;
}

/**
 * The line a postback waits in: its transaction's, named by a digest of the order field's value (any length or
 * character becomes a short key); a postback without the field is alone in its line.
 */
export function orderKeyOf(payload: Buffer, orderField: string, postbackId: string): string {
  let value: unknown;
  try {
    value = (JSON.parse(payload.toString('utf8')) as Record<string, unknown>)[orderField];
  } catch {
    value = undefined;
  }
  const text = typeof value === 'string' || typeof value === 'number' ? String(value) : undefined;
  const name = text === undefined ? postbackId : createHash('sha256').update(text).digest('hex').slice(0, 32);
  return `postback:order:${name}`;
}

/** A verified postback as the inbox keeps it. */
export interface NewPostback {
  readonly id: string;
  readonly payload: string;
  readonly headers: Readonly<Record<string, string>>;
  readonly orderKey: string;
}

/** One postback taken for delivery: what the application gets, and which attempt this is. */
export interface TakenPostback {
  /** Its entry in the stream now (a new one at each retry). */
  readonly streamId: string;
  /** Stable across attempts: X-Postback-Id. */
  readonly id: string;
  /** 1 for the first attempt. */
  readonly attempt: number;
  readonly payload: string;
  readonly headers: Readonly<Record<string, string>>;
  readonly orderKey: string;
}

export type DeliveryOutcome =
  | { readonly outcome: 'delivered' }
  | { readonly outcome: 'retry'; readonly dueMs: number; readonly error: string }
  | { readonly outcome: 'dead'; readonly error: string };

export interface InboxStatus {
  /** Postbacks not yet delivered (dead letters excluded). */
  readonly undelivered: number;
  /** Arrival of the oldest of them, ms since the epoch; undefined when there is none. */
  readonly oldestReceivedMs: number | undefined;
  readonly dead: number;
  readonly retrying: number;
}

/** queued: in the stream (due now, or being delivered); retry: until `nextAttemptMs`; waiting: behind an earlier
 * postback of its transaction; dead: every attempt failed. */
export type PostbackState = 'queued' | 'retry' | 'waiting' | 'dead';

export interface PostbackSummary {
  readonly id: string;
  readonly state: PostbackState;
  readonly receivedMs: number;
  readonly attempts: number;
  readonly lastError: string | undefined;
  readonly nextAttemptMs: number | undefined;
  readonly lastAttemptMs: number | undefined;
}

export interface PostbackDetail extends PostbackSummary {
  readonly payload: string;
  readonly headers: Readonly<Record<string, string>>;
}

export type ReplayResult = 'replayed' | 'due_now' | 'pending' | 'missing';

export type ReplayPlace = 'order' | 'end';

export interface PostbackInbox {
  /** Creates the consumer group (and the stream) when missing; again after a Redis that lost them. */
  prepare(): Promise<void>;
  /** Keeps a verified postback, acknowledged by the configured replicas; `duplicate` when it is kept already. */
  append(postback: NewPostback, nowMs: number): Promise<'accepted' | 'duplicate'>;
  /**
   * As append, without waiting for the replicas: a postback accepted before the store lost it, kept again
   * (requeue-memory.ts). While Redis's replicas resynchronise after it came back empty, each acknowledgement fails;
   * one per postback, no postback after the first would reach the primary until they had.
   */
  appendAgain(postback: NewPostback, receivedMs: number): Promise<void>;
  /** Resolves once the configured replicas hold every write the primary has taken so far (appendAgain's). */
  acknowledgeAppended(nowMs: number): Promise<void>;
  /** New postbacks for `consumer`, each counted as an attempt. */
  read(consumer: string, count: number, nowMs: number): Promise<TakenPostback[]>;
  /**
   * Postbacks given to `consumer` that it is not delivering (`delivering`: their stream ids), at most `count`: a
   * read whose answer was lost on the way (a command timeout) left them with it, unknown to it.
   */
  recover(consumer: string, count: number, nowMs: number, delivering: ReadonlySet<string>): Promise<TakenPostback[]>;
  /** Postbacks another consumer took over `minIdleMs` ago and recorded no outcome for (it died): `consumer`'s now. */
  claimStale(consumer: string, minIdleMs: number, count: number, nowMs: number): Promise<TakenPostback[]>;
  /** Records a delivery's outcome; false when another replica recorded one first, or the postback was dropped. */
  record(postback: TakenPostback, deliveryOutcome: DeliveryOutcome, nowMs: number): Promise<boolean>;
  /** Moves the retries due by `nowMs` back into the stream (at most `count`); how many. */
  releaseDue(nowMs: number, count: number): Promise<number>;
  status(): Promise<InboxStatus>;
  /** Undelivered (`pending`) or `dead` postbacks in arrival order, `limit` from rank `offset`. */
  list(which: 'pending' | 'dead', offset: number, limit: number): Promise<PostbackSummary[]>;
  show(id: string): Promise<PostbackDetail | undefined>;
  /**
   * A dead letter back in its line: by arrival (`order`, ahead of its transaction's later postbacks still waiting)
   * or at its end (`end`); a postback waiting for a retry is made due now.
   */
  replay(id: string, where?: ReplayPlace): Promise<ReplayResult>;
  drop(id: string): Promise<boolean>;
}

/** Every key a move of postback `id`, waiting in line `orderKey`, may touch. */
function keysOf(id: string, orderKey: string): PostbackKeys {
  return {
    entry: entryKey(id),
    stream: STREAM,
    pending: PENDING,
    retry: RETRY,
    dead: DEAD,
    order: orderKey,
    settled: settledKey(id),
  };
}

function summaryOf(row: InspectedPostback): PostbackSummary {
  const { payload: _payload, headers: _headers, line: _line, ...summary } = row;
  return summary;
}

const ACKNOWLEDGED = { acknowledged: true } as const;

/**
 * The inbox on `store`. The store's MAC (SIDECAR_STATE_MAC_KEY_FILE) signs each postback kept and checks it when it
 * is taken: one that fails is never delivered but goes to the dead letters as evidence (counted and logged). Settled
 * marks are sealed too, and only a genuine one lets a copy go (requeue-memory.ts).
 */
export class RedisInbox implements PostbackInbox {
  private readonly mac: RecordMac;
  /** The stored key prefix: INSPECT builds the entry and line keys from it. */
  private readonly scope: string;

  constructor(private readonly store: RedisStateStore) {
    this.mac = store.mac;
    this.scope = store.storedKey('');
  }

  prepare(): Promise<void> {
    return this.store.streamGroupCreate(STREAM, DELIVERY_GROUP);
  }

  async append(postback: NewPostback, nowMs: number): Promise<'accepted' | 'duplicate'> {
    const stored = await this.store.runScript(APPEND, this.appendInput(postback, nowMs, false), ACKNOWLEDGED);
    return stored ? 'accepted' : 'duplicate';
  }

  async appendAgain(postback: NewPostback, receivedMs: number): Promise<void> {
    await this.store.runScript(APPEND, this.appendInput(postback, receivedMs, true));
  }

  async acknowledgeAppended(nowMs: number): Promise<void> {
    const args = { value: this.mac.seal(REQUEUE_MARK, String(nowMs)), ttlMs: REQUEUE_MARK_TTL_MS };
    await this.store.runScript(MARK_WRITTEN, { keys: { mark: REQUEUE_MARK }, args }, ACKNOWLEDGED);
  }

  async read(consumer: string, count: number, nowMs: number): Promise<TakenPostback[]> {
    return this.take(await this.store.streamReadGroup(STREAM, DELIVERY_GROUP, consumer, count), nowMs);
  }

  async recover(
    consumer: string,
    count: number,
    nowMs: number,
    delivering: ReadonlySet<string>,
  ): Promise<TakenPostback[]> {
    const given = await this.store.streamReadGroup(STREAM, DELIVERY_GROUP, consumer, count + delivering.size, 'own');
    return this.take(given.filter((entry) => !delivering.has(entry.id)).slice(0, count), nowMs);
  }

  async claimStale(consumer: string, minIdleMs: number, count: number, nowMs: number): Promise<TakenPostback[]> {
    return this.take(await this.store.streamAutoClaim(STREAM, DELIVERY_GROUP, consumer, minIdleMs, count), nowMs);
  }

  record(
    postback: Pick<TakenPostback, 'streamId' | 'id' | 'orderKey'>,
    deliveryOutcome: DeliveryOutcome,
    nowMs: number,
  ): Promise<boolean> {
    const args = {
      streamId: postback.streamId,
      group: DELIVERY_GROUP,
      id: postback.id,
      outcome: deliveryOutcome.outcome,
      nowMs,
      dueMs: deliveryOutcome.outcome === 'retry' ? deliveryOutcome.dueMs : undefined,
      error: deliveryOutcome.outcome === 'delivered' ? '' : deliveryOutcome.error,
      settledTtlMs: SETTLED_MARK_TTL_MS,
      settledMark: this.mac.seal(settledKey(postback.id), 'delivered'),
    };
    return this.store.runScript(RECORD_OUTCOME, { keys: keysOf(postback.id, postback.orderKey), args });
  }

  releaseDue(nowMs: number, count: number): Promise<number> {
    return this.store.runScript(RELEASE_DUE, { keys: { retry: RETRY, stream: STREAM }, args: { nowMs, count } });
  }

  status(): Promise<InboxStatus> {
    return this.store.runScript(STATUS, { keys: { pending: PENDING, dead: DEAD, retry: RETRY }, args: {} });
  }

  async list(which: 'pending' | 'dead', offset: number, limit: number): Promise<PostbackSummary[]> {
    if (limit <= 0) return [];
    const rows = await this.inspect(which, { first: offset, last: offset + limit - 1, withPayload: false });
    return rows.map(summaryOf);
  }

  async show(id: string): Promise<PostbackDetail | undefined> {
    const [row] = await this.inspect('pending', { first: 0, last: 0, withPayload: true, id });
    if (row === undefined) return undefined;
    const { line: _line, ...detail } = row;
    return detail;
  }

  async replay(id: string, where: ReplayPlace = 'order'): Promise<ReplayResult> {
    const orderKey = await this.lineOf(id);
    if (orderKey === undefined) return 'missing';
    return this.store.runScript(REPLAY, { keys: keysOf(id, orderKey), args: { id, where } }, ACKNOWLEDGED);
  }

  async drop(id: string): Promise<boolean> {
    const orderKey = await this.lineOf(id);
    if (orderKey === undefined) return false;
    const args = { id, settledTtlMs: SETTLED_MARK_TTL_MS, settledMark: this.mac.seal(settledKey(id), 'dropped') };
    return this.store.runScript(DROP, { keys: keysOf(id, orderKey), args }, ACKNOWLEDGED);
  }

  private async take(entries: readonly StreamEntry[], nowMs: number): Promise<TakenPostback[]> {
    const taken: TakenPostback[] = [];
    for (const { id: streamId, fields } of entries) {
      const id = fields.id;
      if (id === undefined) continue;
      const found = await this.store.runScript(TAKE, {
        keys: { entry: entryKey(id), stream: STREAM },
        args: { streamId, group: DELIVERY_GROUP, nowMs },
      });
      if (found === undefined) continue;
      const { payload, headers, orderKey } = found;
      const rejected = this.mac.check('postback', entryKey(id), [payload, headers, orderKey], found.mac);
      if (rejected !== undefined) {
        const error = `refused: MAC ${rejected === 'unsigned' ? 'missing' : 'wrong'} (docs/runbooks.md#runbook-state-records-rejected)`;
        await this.record({ streamId, id, orderKey }, { outcome: 'dead', error }, nowMs);
        continue;
      }
      taken.push({ streamId, id, attempt: found.attempts, payload, headers: parseHeaders(headers), orderKey });
    }
    return taken;
  }

  private async inspect(
    which: 'pending' | 'dead',
    rows: { readonly first: number; readonly last: number; readonly withPayload: boolean; readonly id?: string },
  ): Promise<InspectedPostback[]> {
    return this.store.runScript(INSPECT, {
      keys: { listed: which === 'dead' ? DEAD : PENDING, retry: RETRY, dead: DEAD },
      args: { scope: this.scope, entryPrefix: ENTRY_PREFIX, id: undefined, ...rows },
    });
  }

  /** APPEND's keys and arguments for one postback (its MAC tag among them); `again`: a held copy appended again. */
  private appendInput(postback: NewPostback, receivedMs: number, again: boolean) {
    const { id, payload, orderKey } = postback;
    const headers = JSON.stringify(postback.headers);
    return {
      keys: { entry: entryKey(id), pending: PENDING, order: orderKey, stream: STREAM, settled: settledKey(id) },
      args: {
        id,
        payload,
        headers,
        order: orderKey,
        receivedMs,
        mac: this.mac.tag(entryKey(id), [payload, headers, orderKey]) ?? '',
        again,
        settledMarks: again ? SETTLED_OUTCOMES.flatMap((outcome) => this.mac.sealsOf(settledKey(id), outcome)) : [],
      },
    };
  }

  /** The line a kept postback waits in (its entry names it); undefined when there is no such postback. */
  private async lineOf(id: string): Promise<string | undefined> {
    const [row] = await this.inspect('pending', { first: 0, last: 0, withPayload: false, id });
    return row?.line;
  }
}
