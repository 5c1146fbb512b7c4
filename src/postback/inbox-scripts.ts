// The inbox's moves, each one Lua script so that Redis runs it whole: a postback is never in two places, nor in
// none. Keys (names in inbox.ts) are all under the account's hash tag, so every script stays in one cluster slot.
// Only the first postback of each transaction's line (its "order" list) is ever in the stream or the retry set:
// that is what keeps one transaction's postbacks in arrival order while other transactions go in parallel.
import { luaScript } from '../state/redis-scripts.js';

/**
 * KEYS entry, pending, order, stream, settled mark; ARGV id, payload, headers, order (its short name), now ms, MAC
 * (or ''), again ('1': a copy this replica held, appended again), then every settled mark that opens (sealed with each
 * MAC key in use: a script cannot check a MAC). Stores a new postback and puts it in its transaction's line; first in
 * line, it goes to the stream at once. 1 when stored, 0 when the id is kept already (a redelivery of a postback not
 * yet delivered, or dead) or, appended again, when it was settled meanwhile (delivered or dropped: a genuine settled
 * mark says so; a forged one does not stop it).
 * The payload, headers, order and MAC are written here once and never changed by any script: the MAC the sidecar
 * computed over them (state/record-mac.ts) still holds when TAKE reads them back, whatever moves the id made.
 */
export const APPEND = luaScript(`if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
if ARGV[7] == '1' then
  local mark = redis.call('GET', KEYS[5])
  for i = 8, #ARGV do
    if mark == ARGV[i] then return 0 end
  end
end
redis.call('HSET', KEYS[1], 'payload', ARGV[2], 'headers', ARGV[3], 'order', ARGV[4], 'received_ms', ARGV[5], 'attempts', '0', 'mac', ARGV[6])
redis.call('ZADD', KEYS[2], ARGV[5], ARGV[1])
if redis.call('RPUSH', KEYS[3], ARGV[1]) == 1 then redis.call('XADD', KEYS[4], '*', 'id', ARGV[1]) end
return 1`);

/**
 * KEYS the mark; ARGV a value, its time to live in ms. Always a write, so that a WAIT after it on the same
 * connection counts every write the primary took before it, whichever connection made them (requeue-memory.ts:
 * postbacks appended again without waiting, then acknowledged at once).
 */
export const MARK_WRITTEN = luaScript(`redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return 1`);

/**
 * KEYS entry, stream; ARGV stream entry id, group, now ms. Counts one more attempt and answers
 * {attempts, payload, headers, order, MAC}; false when the postback was dropped meanwhile (its stream entry is done).
 */
export const TAKE = luaScript(`if redis.call('EXISTS', KEYS[1]) == 0 then
  redis.call('XACK', KEYS[2], ARGV[2], ARGV[1])
  redis.call('XDEL', KEYS[2], ARGV[1])
  return false
end
local attempts = redis.call('HINCRBY', KEYS[1], 'attempts', 1)
redis.call('HSET', KEYS[1], 'last_attempt_ms', ARGV[3])
local f = redis.call('HMGET', KEYS[1], 'payload', 'headers', 'order', 'mac')
return {attempts, f[1], f[2], f[3], f[4]}`);

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
 * KEYS entry, stream, pending, retry, dead, order, settled mark; ARGV stream entry id, group, id, outcome (delivered,
 * retry, dead), now ms, due ms (retry), error, the mark's time to live in ms, the settled mark as sealed
 * (record-mac.ts). 1 when recorded; 0 when another replica
 * recorded one first (it took the postback over) or it was dropped. A delivered postback leaves its settled mark in
 * the same step as its entry goes: the only thing that lets a replica forget its own copy (requeue-memory.ts).
 */
export const RECORD_OUTCOME = luaScript(`${LEAVE_LINE}
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
return 1`);

/** KEYS retry, stream; ARGV now ms, count. Moves the retries due back into the stream; how many. */
export const RELEASE_DUE =
  luaScript(`local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, ARGV[2])
for _, id in ipairs(ids) do
  redis.call('ZREM', KEYS[1], id)
  redis.call('XADD', KEYS[2], '*', 'id', id)
end
return #ids`);

/**
 * KEYS entry, stream, pending, retry, dead, order; ARGV id, where ('order' or 'end'). A dead postback goes back in
 * its line with its attempts from zero (`replayed`): by arrival (`order`), before every later postback of its
 * transaction still waiting, a head waiting for its retry included (it steps back, its attempts kept); only a head
 * in the stream (being delivered, or due now) stays first. `end`: behind all of them. One waiting for a retry is
 * made due now (`due_now`); one already in line is left (`pending`); `missing` when there is no such postback.
 */
export const REPLAY = luaScript(`if redis.call('EXISTS', KEYS[1]) == 0 then return 'missing' end
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
return 'pending'`);

/**
 * KEYS entry, stream, pending, retry, dead, order, settled mark; ARGV id, the mark's time to live in ms, the mark as
 * sealed. Forgets a
 * postback wherever it is, leaving its settled mark (the replicas holding a copy let it go); 1 when it was there.
 */
export const DROP = luaScript(`${LEAVE_LINE}
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
redis.call('DEL', KEYS[1])
redis.call('SET', KEYS[7], ARGV[3], 'PX', ARGV[2])
redis.call('ZREM', KEYS[3], ARGV[1])
redis.call('ZREM', KEYS[4], ARGV[1])
redis.call('ZREM', KEYS[5], ARGV[1])
leave_line(KEYS[6], KEYS[2], ARGV[1])
return 1`);

/** KEYS pending, dead, retry. {undelivered, oldest undelivered's arrival ms or '', dead, waiting for a retry}. */
export const STATUS = luaScript(`local oldest = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
return {redis.call('ZCARD', KEYS[1]), oldest[2] or '', redis.call('ZCARD', KEYS[2]), redis.call('ZCARD', KEYS[3])}`);

/**
 * KEYS listed (pending or dead), retry, dead; ARGV the stored key prefix, first, last (ranks in arrival order), with
 * payload ('1'), one id (or ''). Per postback {id, state, received ms, attempts, last error, next attempt ms, last
 * attempt ms, payload, headers, line}. The entry and line keys are built from the prefix: the account's, same slot.
 */
export const INSPECT = luaScript(`local scope = ARGV[1]
local ids
if ARGV[5] ~= '' then ids = {ARGV[5]} else ids = redis.call('ZRANGE', KEYS[1], ARGV[2], ARGV[3]) end
local out = {}
for _, id in ipairs(ids) do
  local entry = scope .. 'postback:entry:' .. id
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
return out`);
