// The durable postback inbox (`queued` delivery, docs/postbacks.md) on Redis Streams, under the account's hash tag:
//   postback:inbox  the stream of postbacks to deliver, read by the consumer group `sidecar-delivery`
//   postback:retry  a sorted set of failed postbacks by the time of their next attempt
//   postback:dead   the stream of postbacks whose every attempt failed
// Delivery is at least once: a replica that dies between two steps leaves the postback to be delivered again,
// never lost, and X-Postback-Id (the id of its first entry, kept across retries) lets the application see that.
import type { RedisStateStore, StreamEntry } from '../state/redis-store.js';

export const INBOX_STREAM = 'postback:inbox';
export const RETRY_SET = 'postback:retry';
export const DEAD_LETTER_STREAM = 'postback:dead';
export const DELIVERY_GROUP = 'sidecar-delivery';

/** One postback to deliver: what the application gets, and which attempt this is. */
export interface InboxEntry {
  /** The stream entry now holding it (changes at each retry). */
  readonly entryId: string;
  /** Stable across retries: the id of its first entry. */
  readonly postbackId: string;
  /** 1 for the first attempt. */
  readonly attempt: number;
  readonly payload: string;
  readonly headers: Readonly<Record<string, string>>;
}

export interface PostbackInbox {
  /** Creates the consumer group (and the stream) when missing; again after a Redis that lost them. */
  prepare(): Promise<void>;
  /** Keeps a verified postback; resolves once the configured replicas hold it too. Its postback id. */
  append(payload: string, headers: Readonly<Record<string, string>>): Promise<string>;
  /** New entries for `consumer`. */
  read(consumer: string, count: number): Promise<InboxEntry[]>;
  /** Entries left pending longer than `minIdleMs` by a consumer that stopped or died, now `consumer`'s. */
  claimStale(consumer: string, minIdleMs: number, count: number): Promise<InboxEntry[]>;
  /** Delivered: out of the stream. */
  done(entry: InboxEntry): Promise<void>;
  /** Failed, with attempts left: kept in the retry set until `dueMs`, then out of the stream. */
  retryAt(entry: InboxEntry, dueMs: number): Promise<void>;
  /** Failed for the last time: into the dead letters, then out of the stream. */
  deadLetter(entry: InboxEntry, reason: string): Promise<void>;
  /** Moves the retries due by `nowMs` back into the stream (at most `count`); how many this call moved. */
  releaseDue(nowMs: number, count: number): Promise<number>;
}

interface RetryMember {
  readonly postbackId: string;
  readonly attempt: number;
  readonly payload: string;
  readonly headers: Readonly<Record<string, string>>;
}

function fieldsOf(postbackId: string | undefined, attempt: number, payload: string, headers: object) {
  return {
    ...(postbackId === undefined ? {} : { postback_id: postbackId }),
    attempt: String(attempt),
    payload,
    headers: JSON.stringify(headers),
  };
}

function entryOf(raw: StreamEntry): InboxEntry | undefined {
  const { payload, headers, attempt, postback_id: postbackId } = raw.fields;
  if (payload === undefined || headers === undefined) return undefined;
  let parsed: unknown;
  try {
    parsed = JSON.parse(headers);
  } catch {
    return undefined;
  }
  if (typeof parsed !== 'object' || parsed === null) return undefined;
  const clean: Record<string, string> = {};
  for (const [name, value] of Object.entries(parsed)) if (typeof value === 'string') clean[name] = value;
  const n = Number(attempt);
  return {
    entryId: raw.id,
    postbackId: postbackId ?? raw.id,
    attempt: Number.isInteger(n) && n > 0 ? n : 1,
    payload,
    headers: clean,
  };
}

function entries(raw: readonly StreamEntry[]): InboxEntry[] {
  return raw.map(entryOf).filter((entry): entry is InboxEntry => entry !== undefined);
}

export function createRedisInbox(store: RedisStateStore): PostbackInbox {
  const acknowledged = { acknowledged: true } as const;
  return {
    prepare: () => store.streamGroupCreate(INBOX_STREAM, DELIVERY_GROUP),
    append: (payload, headers) => store.streamAdd(INBOX_STREAM, fieldsOf(undefined, 1, payload, headers), acknowledged),
    read: async (consumer, count) =>
      entries(await store.streamReadGroup(INBOX_STREAM, DELIVERY_GROUP, consumer, count)),
    claimStale: async (consumer, minIdleMs, count) =>
      entries(await store.streamAutoClaim(INBOX_STREAM, DELIVERY_GROUP, consumer, minIdleMs, count)),
    done: (entry) => store.streamAck(INBOX_STREAM, DELIVERY_GROUP, entry.entryId),
    async retryAt(entry, dueMs) {
      const member: RetryMember = {
        postbackId: entry.postbackId,
        attempt: entry.attempt + 1,
        payload: entry.payload,
        headers: entry.headers,
      };
      // Kept for the retry before it leaves the stream: a failure in between delivers it again, never loses it.
      await store.zAdd(RETRY_SET, JSON.stringify(member), dueMs, acknowledged);
      await store.streamAck(INBOX_STREAM, DELIVERY_GROUP, entry.entryId);
    },
    async deadLetter(entry, reason) {
      const fields = { ...fieldsOf(entry.postbackId, entry.attempt, entry.payload, entry.headers), reason };
      await store.streamAdd(DEAD_LETTER_STREAM, fields, acknowledged);
      await store.streamAck(INBOX_STREAM, DELIVERY_GROUP, entry.entryId);
    },
    async releaseDue(nowMs, count) {
      let moved = 0;
      for (const text of await store.zRangeByScore(RETRY_SET, nowMs, count)) {
        let member: RetryMember;
        try {
          member = JSON.parse(text) as RetryMember;
        } catch {
          await store.zRem(RETRY_SET, text);
          continue;
        }
        // Appended first and removed second, so that a failure in between keeps it. Of several replicas moving it
        // at once only the one whose ZREM removes it keeps its copy; the others delete theirs.
        const id = await store.streamAdd(
          INBOX_STREAM,
          fieldsOf(member.postbackId, member.attempt, member.payload, member.headers),
          acknowledged,
        );
        if (await store.zRem(RETRY_SET, text)) moved++;
        else await store.streamAck(INBOX_STREAM, DELIVERY_GROUP, id);
      }
      return moved;
    },
  };
}
