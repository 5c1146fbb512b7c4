// The inbox's moves, each one Lua script so that Redis runs it whole: a postback is never in two places, nor in
// none. Keys (names in inbox.ts) are all under the account's hash tag, so every script stays in one cluster slot.
// Only the first postback of each transaction's line (its "order" list) is ever in the stream or the retry set:
// that is what keeps one transaction's postbacks in arrival order while other transactions go in parallel.
import { isOne, RedisScript, stringsOf, type NoArgs } from '../state/redis-scripts.js';
import type {
  DeliveryOutcome,
  InboxStatus,
  PostbackDetail,
  PostbackState,
  ReplayPlace,
  ReplayResult,
} from './inbox.js';

/** A postback's keys every move of it may touch (short names; its line's is named in its entry). */
export interface PostbackKeys {
  readonly entry: string;
  readonly stream: string;
  readonly pending: string;
  readonly retry: string;
  readonly dead: string;
  /** Its line: the transaction's order list. */
  readonly order: string;
  readonly settled: string;
}

/** KEYS of the scripts that move a postback anywhere: every key of PostbackKeys, in this order. */
const postbackKeys = (k: PostbackKeys): string[] => [k.entry, k.stream, k.pending, k.retry, k.dead, k.order, k.settled];

/** Its headers as kept (JSON); anything but an object of strings reads as none. */
export function parseHeaders(text: string): Record<string, string> {
  const clean: Record<string, string> = {};
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch {
    return clean;
  }
  if (typeof parsed !== 'object' || parsed === null) return clean;
  for (const [name, value] of Object.entries(parsed)) if (typeof value === 'string') clean[name] = value;
  return clean;
}

const msOrUndefined = (text: string | undefined): number | undefined =>
  text === undefined || text === '' ? undefined : Number(text);

/**
 * Stores a new postback and puts it in its transaction's line; first in line, it goes to the stream at once. True when
 * stored; false when the id is kept already (a redelivery of a postback not yet delivered, or dead) or, appended
 * `again` (a copy this replica held), when it was settled meanwhile (delivered or dropped: a genuine settled mark
 * says so, one of `settledMarks`, sealed with each MAC key in use: a script cannot check a MAC; a forged one does not
 * stop it). The payload, headers, order and MAC are written here once and never changed by any script: the MAC the
 * sidecar computed over them (state/record-mac.ts) still holds when TAKE reads them back, whatever moves the id made.
 */
export const APPEND = new RedisScript({
  command: 'inbox_append',
  source: `if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
if ARGV[7] == '1' then
  local mark = redis.call('GET', KEYS[5])
  for i = 8, #ARGV do
    if mark == ARGV[i] then return 0 end
  end
end
redis.call('HSET', KEYS[1], 'payload', ARGV[2], 'headers', ARGV[3], 'order', ARGV[4], 'received_ms', ARGV[5], 'attempts', '0', 'mac', ARGV[6])
redis.call('ZADD', KEYS[2], ARGV[5], ARGV[1])
if redis.call('RPUSH', KEYS[3], ARGV[1]) == 1 then redis.call('XADD', KEYS[4], '*', 'id', ARGV[1]) end
return 1`,
  keys: (k: Pick<PostbackKeys, 'entry' | 'pending' | 'order' | 'stream' | 'settled'>) => [
    k.entry,
    k.pending,
    k.order,
    k.stream,
    k.settled,
  ],
  args: (a: {
    readonly id: string;
    readonly payload: string;
    /** JSON, as the MAC covers it. */
    readonly headers: string;
    /** The line's short name, kept in the entry. */
    readonly order: string;
    readonly receivedMs: number;
    /** The MAC tag over payload, headers and order; '' without a MAC key. */
    readonly mac: string;
    readonly again: boolean;
    readonly settledMarks: readonly string[];
  }) => [a.id, a.payload, a.headers, a.order, a.receivedMs, a.mac, a.again ? '1' : '0', ...a.settledMarks],
  reply: isOne,
});

/**
 * Writes `value` to the mark. Always a write, so that a WAIT after it on the same connection counts every write the
 * primary took before it, whichever connection made them (requeue-memory.ts: postbacks appended again without
 * waiting, then acknowledged at once).
 */
export const MARK_WRITTEN = new RedisScript({
  command: 'inbox_append',
  source: `redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return 1`,
  keys: ({ mark }: { readonly mark: string }) => [mark],
  args: ({ value, ttlMs }: { readonly value: string; readonly ttlMs: number }) => [value, ttlMs],
  reply: () => undefined,
});

/** A postback's fields as TAKE reads them, before its MAC is checked. */
export interface TakenFields {
  readonly attempts: number;
  readonly payload: string;
  /** JSON, as the MAC covers it. */
  readonly headers: string;
  readonly orderKey: string;
  readonly mac: string | undefined;
}

/**
 * Counts one more attempt of the postback whose stream entry is `streamId` and answers its fields; undefined when the
 * postback was dropped meanwhile (its stream entry is done).
 */
export const TAKE = new RedisScript({
  command: 'inbox_take',
  source: `if redis.call('EXISTS', KEYS[1]) == 0 then
  redis.call('XACK', KEYS[2], ARGV[2], ARGV[1])
  redis.call('XDEL', KEYS[2], ARGV[1])
  return false
end
local attempts = redis.call('HINCRBY', KEYS[1], 'attempts', 1)
redis.call('HSET', KEYS[1], 'last_attempt_ms', ARGV[3])
local f = redis.call('HMGET', KEYS[1], 'payload', 'headers', 'order', 'mac')
return {attempts, f[1], f[2], f[3], f[4]}`,
  keys: (k: Pick<PostbackKeys, 'entry' | 'stream'>) => [k.entry, k.stream],
  args: (a: { readonly streamId: string; readonly group: string; readonly nowMs: number }) => [
    a.streamId,
    a.group,
    a.nowMs,
  ],
  reply: (raw): TakenFields | undefined => {
    const [attempts, payload, headers, orderKey, mac] = stringsOf(raw);
    if (attempts === undefined || payload === undefined || orderKey === undefined) return undefined;
    return { attempts: Number(attempts), payload, headers: headers ?? '', orderKey, mac };
  },
});

/** Shared by RECORD_OUTCOME and DROP: takes `id` out of its line; its transaction's next one goes to the stream. */
const LEAVE_LINE = `local function leave_line(line, stream, id)
  if redis.call('LINDEX', line, 0) == id then
    redis.call('LPOP', line)
    local next = redis.call('LINDEX', line, 0)
    if next then redis.call('XADD', stream, '*', 'id', next) end
  else
    redis.call('LREM', line, 1, id)
  end
end
`;

/**
 * Records a delivery's outcome (`dueMs` for a retry; `error` unless delivered). True when recorded; false when another
 * replica recorded one first (it took the postback over) or it was dropped. A delivered postback leaves its settled
 * mark (`settledMark`, as sealed: record-mac.ts) in the same step as its entry goes: the only thing that lets a
 * replica forget its own copy (requeue-memory.ts).
 */
export const RECORD_OUTCOME = new RedisScript({
  command: 'inbox_settle',
  source: `${LEAVE_LINE}
local acked = redis.call('XACK', KEYS[2], ARGV[2], ARGV[1])
redis.call('XDEL', KEYS[2], ARGV[1])
if acked == 0 or redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
if ARGV[4] == 'retry' then
  redis.call('ZADD', KEYS[4], ARGV[6], ARGV[3])
  redis.call('HSET', KEYS[1], 'last_error', ARGV[7])
  return 1
end
redis.call('ZREM', KEYS[3], ARGV[3])
if ARGV[4] == 'dead' then
  redis.call('ZADD', KEYS[5], ARGV[5], ARGV[3])
  redis.call('HSET', KEYS[1], 'last_error', ARGV[7])
else
  redis.call('DEL', KEYS[1])
  redis.call('SET', KEYS[7], ARGV[9], 'PX', ARGV[8])
end
leave_line(KEYS[6], KEYS[2], ARGV[3])
return 1`,
  keys: postbackKeys,
  args: (a: {
    readonly streamId: string;
    readonly group: string;
    readonly id: string;
    readonly outcome: DeliveryOutcome['outcome'];
    readonly nowMs: number;
    readonly dueMs: number | undefined;
    readonly error: string;
    readonly settledTtlMs: number;
    readonly settledMark: string;
  }) => [a.streamId, a.group, a.id, a.outcome, a.nowMs, a.dueMs ?? '', a.error, a.settledTtlMs, a.settledMark],
  reply: isOne,
});

/** Moves the retries due by `nowMs` back into the stream, at most `count`; how many. */
export const RELEASE_DUE = new RedisScript({
  command: 'inbox_release',
  source: `local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, ARGV[2])
for _, id in ipairs(ids) do
  redis.call('ZREM', KEYS[1], id)
  redis.call('XADD', KEYS[2], '*', 'id', id)
end
return #ids`,
  keys: (k: Pick<PostbackKeys, 'retry' | 'stream'>) => [k.retry, k.stream],
  args: (a: { readonly nowMs: number; readonly count: number }) => [a.nowMs, a.count],
  reply: (raw) => Number(raw),
});

/**
 * A dead postback goes back in its line with its attempts from zero (`replayed`): by arrival (`where` `order`), before
 * every later postback of its transaction still waiting, a head waiting for its retry included (it steps back, its
 * attempts kept); only a head in the stream (being delivered, or due now) stays first. `end`: behind all of them. One
 * waiting for a retry is made due now (`due_now`); one already in line is left (`pending`); `missing` when there is
 * no such postback.
 */
export const REPLAY = new RedisScript({
  command: 'inbox_admin',
  source: `if redis.call('EXISTS', KEYS[1]) == 0 then return 'missing' end
if redis.call('ZREM', KEYS[5], ARGV[1]) == 1 then
  local received = redis.call('HGET', KEYS[1], 'received_ms')
  redis.call('HSET', KEYS[1], 'attempts', '0')
  redis.call('HDEL', KEYS[1], 'last_error')
  redis.call('ZADD', KEYS[3], received, ARGV[1])
  local line = redis.call('LRANGE', KEYS[6], 0, -1)
  local before = false
  if ARGV[2] == 'order' then
    local first = 1
    if line[1] and not redis.call('ZSCORE', KEYS[4], line[1]) then first = 2 end
    for i = first, #line do
      if tonumber(redis.call('ZSCORE', KEYS[3], line[i]) or '0') > tonumber(received) then
        before = line[i]
        break
      end
    end
  end
  if not before then
    if redis.call('RPUSH', KEYS[6], ARGV[1]) == 1 then redis.call('XADD', KEYS[2], '*', 'id', ARGV[1]) end
    return 'replayed'
  end
  redis.call('LINSERT', KEYS[6], 'BEFORE', before, ARGV[1])
  if before == line[1] then
    redis.call('ZREM', KEYS[4], before)
    redis.call('XADD', KEYS[2], '*', 'id', ARGV[1])
  end
  return 'replayed'
end
if redis.call('ZREM', KEYS[4], ARGV[1]) == 1 then
  redis.call('XADD', KEYS[2], '*', 'id', ARGV[1])
  return 'due_now'
end
return 'pending'`,
  keys: (k: Omit<PostbackKeys, 'settled'>) => [k.entry, k.stream, k.pending, k.retry, k.dead, k.order],
  args: (a: { readonly id: string; readonly where: ReplayPlace }) => [a.id, a.where],
  reply: (raw) => String(raw) as ReplayResult,
});

/**
 * Forgets a postback wherever it is, leaving its settled mark (`settledMark`, as sealed: the replicas holding a copy
 * let it go); true when it was there.
 */
export const DROP = new RedisScript({
  command: 'inbox_admin',
  source: `${LEAVE_LINE}
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
redis.call('DEL', KEYS[1])
redis.call('SET', KEYS[7], ARGV[3], 'PX', ARGV[2])
redis.call('ZREM', KEYS[3], ARGV[1])
redis.call('ZREM', KEYS[4], ARGV[1])
redis.call('ZREM', KEYS[5], ARGV[1])
leave_line(KEYS[6], KEYS[2], ARGV[1])
return 1`,
  keys: postbackKeys,
  args: (a: { readonly id: string; readonly settledTtlMs: number; readonly settledMark: string }) => [
    a.id,
    a.settledTtlMs,
    a.settledMark,
  ],
  reply: isOne,
});

/** The backlog's figures: {undelivered, oldest undelivered's arrival ms or '', dead, waiting for a retry}. */
export const STATUS = new RedisScript({
  command: 'inbox_status',
  source: `local oldest = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
return {redis.call('ZCARD', KEYS[1]), oldest[2] or '', redis.call('ZCARD', KEYS[2]), redis.call('ZCARD', KEYS[3])}`,
  keys: (k: Pick<PostbackKeys, 'pending' | 'dead' | 'retry'>) => [k.pending, k.dead, k.retry],
  args: (_: NoArgs) => [],
  reply: (raw): InboxStatus => {
    const [undelivered, oldest, dead, retrying] = stringsOf(raw);
    return {
      undelivered: Number(undelivered ?? 0),
      oldestReceivedMs: msOrUndefined(oldest),
      dead: Number(dead ?? 0),
      retrying: Number(retrying ?? 0),
    };
  },
});

/** A row of INSPECT: the postback, and the line it waits in (for the scripts that take it out of it). */
export interface InspectedPostback extends PostbackDetail {
  readonly line: string;
}

function inspected(row: unknown): InspectedPostback | undefined {
  const [id, state, received, attempts, lastError, due, lastAttempt, payload, headers, line] = stringsOf(row);
  if (id === undefined || state === undefined || line === undefined) return undefined;
  return {
    line,
    id,
    state: state as PostbackState,
    receivedMs: Number(received),
    attempts: Number(attempts),
    lastError: lastError === '' ? undefined : lastError,
    nextAttemptMs: msOrUndefined(due),
    lastAttemptMs: msOrUndefined(lastAttempt),
    payload: payload ?? '',
    headers: parseHeaders(headers ?? '{}'),
  };
}

/**
 * The postbacks of `listed` (pending or dead) from rank `first` to `last` in arrival order, or the one `id`; their
 * payload and headers `withPayload` only. The entry and line keys are built from `scope`, the stored key prefix: the
 * account's, same slot.
 */
export const INSPECT = new RedisScript({
  command: 'inbox_status',
  source: `local scope = ARGV[1]
local ids
if ARGV[5] ~= '' then ids = {ARGV[5]} else ids = redis.call('ZRANGE', KEYS[1], ARGV[2], ARGV[3]) end
local out = {}
for _, id in ipairs(ids) do
  local entry = scope .. ARGV[6] .. id
  if redis.call('EXISTS', entry) == 1 then
    local f = redis.call('HMGET', entry, 'received_ms', 'attempts', 'last_error', 'order', 'last_attempt_ms', 'payload', 'headers')
    local state, due = 'queued', ''
    if redis.call('ZSCORE', KEYS[3], id) then
      state = 'dead'
    else
      due = redis.call('ZSCORE', KEYS[2], id) or ''
      if due ~= '' then
        state = 'retry'
      elseif f[4] and redis.call('LINDEX', scope .. f[4], 0) ~= id then
        state = 'waiting'
      end
    end
    local payload, headers = '', ''
    if ARGV[4] == '1' then payload, headers = f[6] or '', f[7] or '' end
    table.insert(out, {id, state, f[1] or '', f[2] or '0', f[3] or '', due, f[5] or '', payload, headers, f[4] or ''})
  end
end
return out`,
  keys: (k: { readonly listed: string; readonly retry: string; readonly dead: string }) => [k.listed, k.retry, k.dead],
  args: (a: {
    readonly scope: string;
    readonly first: number;
    readonly last: number;
    readonly withPayload: boolean;
    readonly id: string | undefined;
    /** The entries' short key prefix (ENTRY_PREFIX, inbox.ts). */
    readonly entryPrefix: string;
  }) => [a.scope, a.first, a.last, a.withPayload ? '1' : '0', a.id ?? '', a.entryPrefix],
  reply: (raw): InspectedPostback[] =>
    (Array.isArray(raw) ? raw : []).map(inspected).filter((row) => row !== undefined),
});
