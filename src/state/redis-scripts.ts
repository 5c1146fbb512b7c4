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
 * Compare-and-set in one step (Redis runs a script atomically). KEYS[1] the key; ARGV[1] '1' when a value is
 * expected, '0' when the key must hold nothing; ARGV[2] the expected value; ARGV[3] the new value; ARGV[4] the TTL
 * in ms. Returns 1 when written. GET of a missing key is `false` in Lua, never equal to a string.
 */
export const COMPARE_AND_SET = luaScript(`local current = redis.call('GET', KEYS[1])
if ARGV[1] == '1' then
  if current ~= ARGV[2] then return 0 end
elseif current then
  return 0
end
redis.call('SET', KEYS[1], ARGV[3], 'PX', ARGV[4])
return 1`);

/** Delete only when the key holds ARGV[1] (a lock released by its owner only). Returns 1 when deleted. */
export const COMPARE_AND_DELETE = luaScript(`if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0`);

/**
 * Several writes when several keys hold what is expected, in one step. KEYS: the n condition keys, then the write
 * keys. ARGV[1] n; then per condition a flag ('1' a value expected, '0' nothing) and the value; then per write its
 * value and TTL in ms. Returns 1 when written.
 */
export const WRITE_IF = luaScript(`local n = tonumber(ARGV[1])
for i = 1, n do
  local current = redis.call('GET', KEYS[i])
  if ARGV[2 * i] == '1' then
    if current ~= ARGV[2 * i + 1] then return 0 end
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
