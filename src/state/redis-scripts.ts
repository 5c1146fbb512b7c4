import { createHash } from 'node:crypto';

/** A Lua script run by its SHA-1 (EVALSHA), sent whole (EVAL) only when the server does not know it yet. */
export interface LuaScript {
  readonly source: string;
  readonly sha1: string;
}

export function luaScript(source: string): LuaScript {
  return { source, sha1: createHash('sha1').update(source).digest('hex') };
}

/**
 * Lua: the content of a stored value, without the MAC tag the store seals records with (record-mac.ts:
 * `mac1.<43 characters>.<content>`); the value itself when it carries none. Comparisons are made on content: a caller
 * knows what it read, not the tag it was sealed with (which changes with a key rotation). A value with a wrong tag
 * and the expected content compares equal, and is only ever replaced or deleted that way, never trusted.
 */
export const LUA_CONTENT = `local function content(v)
  if v and string.sub(v, 1, 5) == 'mac1.' and string.sub(v, 49, 49) == '.' then return string.sub(v, 50) end
  return v
end
`;

/**
 * Compare-and-set in one step (Redis runs a script atomically). KEYS[1] the key; ARGV[1] '1' when a value is
 * expected, '0' when the key must hold nothing; ARGV[2] the expected content; ARGV[3] the new value; ARGV[4] the TTL
 * in ms. Returns 1 when written. GET of a missing key is `false` in Lua, never equal to a string.
 */
export const COMPARE_AND_SET = luaScript(`${LUA_CONTENT}local current = redis.call('GET', KEYS[1])
if ARGV[1] == '1' then
  if content(current) ~= ARGV[2] then return 0 end
elseif current then
  return 0
end
redis.call('SET', KEYS[1], ARGV[3], 'PX', ARGV[4])
return 1`);

/** Delete only when the key's content is ARGV[1] (a lock released by its owner only). Returns 1 when deleted. */
export const COMPARE_AND_DELETE = luaScript(`${LUA_CONTENT}if content(redis.call('GET', KEYS[1])) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0`);

/** Delete only when the key holds exactly ARGV[1], tag and all: a record refused by its MAC, and nothing else. */
export const DELETE_EXACT = luaScript(`if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0`);

/**
 * SET NX PX, where a key without an expiry, or with more of it left than ARGV[2] ms, counts as absent: no sidecar
 * writes one (a lock or cooldown that would otherwise hold for ever). KEYS[1] the key; ARGV[1] the value, ARGV[2] the
 * TTL in ms. Returns 1 when written.
 */
export const SET_IF_ABSENT_BOUNDED = luaScript(`local left = redis.call('PTTL', KEYS[1])
if left == -1 or left > tonumber(ARGV[2]) then redis.call('DEL', KEYS[1]) end
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return 1 end
return 0`);

/**
 * Several writes when several keys hold what is expected, in one step. KEYS: the n condition keys, then the write
 * keys. ARGV[1] n; then per condition a flag ('1' a value expected, '0' nothing) and the content; then per write its
 * value and TTL in ms. Returns 1 when written.
 */
export const WRITE_IF = luaScript(`${LUA_CONTENT}local n = tonumber(ARGV[1])
for i = 1, n do
  local current = redis.call('GET', KEYS[i])
  if ARGV[2 * i] == '1' then
    if content(current) ~= ARGV[2 * i + 1] then return 0 end
  elseif current then
    return 0
  end
end
local at = 2 * n + 2
for j = n + 1, #KEYS do
  redis.call('SET', KEYS[j], ARGV[at], 'PX', ARGV[at + 1])
  at = at + 2
end
return 1`);
