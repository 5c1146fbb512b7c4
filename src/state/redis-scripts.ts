// Every Lua script the sidecar runs on Redis is a RedisScript: its source, and beside it the order of its KEYS and
// ARGV (written once, in `keys` and `args`) and how its reply is read, so that a caller names what it passes and gets
// a typed value back: `store.runScript(SCRIPT, { keys: { entry }, args: { nowMs } })`. The store runs it (EVALSHA,
// EVAL when the server does not know it yet, TRYAGAIN retried, acknowledged on request: redis-store.ts).
import { createHash } from 'node:crypto';
import type { StateStoreCommand } from '../observability/state-store-metrics.js';

/** An argument as a script takes it: Redis passes each one as a string, numbers in decimal. */
export type ScriptArgument = string | number;

/** What a caller passes a script: its keys (short names, scoped by the store) and its arguments, by name. */
export interface ScriptInput<Keys, Args> {
  readonly keys: Keys;
  readonly args: Args;
}

/** One call as Redis takes it: KEYS and ARGV in the order the source reads them. */
export interface ScriptCall {
  readonly keys: readonly string[];
  readonly args: string[];
}

export interface ScriptDefinition<Keys, Args, Reply> {
  /** The `command` label its calls are counted under (signing_sidecar_state_store_command_duration_seconds). */
  readonly command: StateStoreCommand;
  readonly source: string;
  /** KEYS, in the order the source reads them. */
  readonly keys: (keys: Keys) => readonly string[];
  /** ARGV, in the order the source reads them. */
  readonly args: (args: Args) => readonly ScriptArgument[];
  /** The reply as Redis sends it, read into what the caller uses. */
  readonly reply: (raw: unknown) => Reply;
  /**
   * Whether the reply says the script wrote anything: an acknowledged call waits for the replicas only then (a key
   * held already was written, and waited for, by someone else). Default: always.
   */
  readonly wrote?: (reply: Reply) => boolean;
}

/** A script with no arguments takes `args: {}`. */
export type NoArgs = Readonly<Record<string, never>>;

/** A Lua script run by its SHA-1 (EVALSHA), sent whole (EVAL) only when the server does not know it yet. */
export class RedisScript<Keys, Args, Reply> {
  readonly source: string;
  readonly sha1: string;
  readonly command: StateStoreCommand;

  constructor(private readonly definition: ScriptDefinition<Keys, Args, Reply>) {
    this.source = definition.source;
    this.sha1 = createHash('sha1').update(definition.source).digest('hex');
    this.command = definition.command;
  }

  call(input: ScriptInput<Keys, Args>): ScriptCall {
    return { keys: this.definition.keys(input.keys), args: this.definition.args(input.args).map(String) };
  }

  reply(raw: unknown): Reply {
    return this.definition.reply(raw);
  }

  wrote(reply: Reply): boolean {
    return this.definition.wrote?.(reply) ?? true;
  }
}

/** Replies read the way most scripts answer: 1 for done, 0 for not. */
export const isOne = (raw: unknown): boolean => Number(raw) === 1;
/** `wrote` of a script that answers whether it wrote. */
export const whenWritten = (written: boolean): boolean => written;
/** A reply that is an array, each element as a string (nil as ''); anything else as no element. */
export const stringsOf = (raw: unknown): string[] => (Array.isArray(raw) ? raw.map((item) => String(item ?? '')) : []);

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
 * Compare-and-set in one step (Redis runs a script atomically): `value` written when the key's content is
 * `expected` (undefined: the key must hold nothing). True when written. GET of a missing key is `false` in Lua,
 * never equal to a string.
 */
export const COMPARE_AND_SET = new RedisScript({
  command: 'compare_and_set',
  source: `${LUA_CONTENT}local current = redis.call('GET', KEYS[1])
if ARGV[1] == '1' then
  if content(current) ~= ARGV[2] then return 0 end
elseif current then
  return 0
end
redis.call('SET', KEYS[1], ARGV[3], 'PX', ARGV[4])
return 1`,
  keys: ({ key }: { readonly key: string }) => [key],
  args: (a: { readonly expected: string | undefined; readonly value: string; readonly ttlMs: number }) => [
    a.expected === undefined ? '0' : '1',
    a.expected ?? '',
    a.value,
    a.ttlMs,
  ],
  reply: isOne,
  wrote: whenWritten,
});

/** Delete only when the key's content is `expected` (a lock released by its owner only). True when deleted. */
export const COMPARE_AND_DELETE = new RedisScript({
  command: 'compare_and_delete',
  source: `${LUA_CONTENT}if content(redis.call('GET', KEYS[1])) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0`,
  keys: ({ key }: { readonly key: string }) => [key],
  args: ({ expected }: { readonly expected: string }) => [expected],
  reply: isOne,
});

/** Delete only when the key holds exactly `stored`, tag and all: a record refused by its MAC, and nothing else. */
export const DELETE_EXACT = new RedisScript({
  command: 'compare_and_delete',
  source: `if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0`,
  keys: ({ key }: { readonly key: string }) => [key],
  args: ({ stored }: { readonly stored: string }) => [stored],
  reply: isOne,
});

/**
 * SET NX PX, where a key without an expiry, or with more of it left than `ttlMs`, counts as absent: no sidecar
 * writes one (a lock or cooldown that would otherwise hold for ever). True when written.
 */
export const SET_IF_ABSENT_BOUNDED = new RedisScript({
  command: 'set_if_absent',
  source: `local left = redis.call('PTTL', KEYS[1])
if left == -1 or left > tonumber(ARGV[2]) then redis.call('DEL', KEYS[1]) end
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return 1 end
return 0`,
  keys: ({ key }: { readonly key: string }) => [key],
  args: ({ value, ttlMs }: { readonly value: string; readonly ttlMs: number }) => [value, ttlMs],
  reply: isOne,
  wrote: whenWritten,
});

/**
 * Several writes when several keys hold what is expected, in one step. KEYS: the n condition keys, then the write
 * keys. ARGV: n; then per condition a flag ('1' a value expected, '0' nothing) and the content; then per write its
 * value and TTL in ms. True when written.
 */
export const WRITE_IF = new RedisScript({
  command: 'write_if',
  source: `${LUA_CONTENT}local n = tonumber(ARGV[1])
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
return 1`,
  keys: (k: { readonly conditions: readonly string[]; readonly writes: readonly string[] }) => [
    ...k.conditions,
    ...k.writes,
  ],
  args: (a: {
    /** What each condition key must hold, in the order of the keys; undefined: nothing. */
    readonly holds: readonly (string | undefined)[];
    readonly writes: readonly { readonly value: string; readonly ttlMs: number }[];
  }) => [
    a.holds.length,
    ...a.holds.flatMap((holds) => [holds === undefined ? '0' : '1', holds ?? '']),
    ...a.writes.flatMap(({ value, ttlMs }) => [value, ttlMs]),
  ],
  reply: isOne,
  wrote: whenWritten,
});
