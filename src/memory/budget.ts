// The process's one memory budget (docs/operations.md, "Memory"): read from the container's limit (the pod's
// `resources.limits.memory`, through the cgroup), else from V8's heap, and split into named shares: the runtime
// itself, bodies in flight, the memory store and headroom for garbage. Each listener and store takes its size from
// here, so that budgets that each hold alone cannot add up past the pod; past the high-water mark every listener
// sheds new work (pressure.ts). A pure function of the figures read at start, so that the sizing table in the docs
// and the tests compute the same numbers.
import { totalmem } from 'node:os';
import { getHeapStatistics } from 'node:v8';
import { ConfigError } from '../errors.js';

export const MIB = 1024 * 1024;

/**
 * What the process needs whatever it holds: code, modules, V8's own heaps, sockets and the requests at work. An idle
 * `serve` of the image holds 65 MB (docs/performance.md); some 1,400 open connections and their parsers add the rest.
 */
export const RUNTIME_BYTES = 72 * MIB;
/** Kept free for garbage between collections, the young generation and malloc's slack: a share of the limit. */
export const HEADROOM_SHARE = 0.15;
export const HEADROOM_MIN_BYTES = 24 * MIB;
/** Of what is left after the runtime and the headroom: the bodies in flight (both listeners)... */
export const BODIES_SHARE = 0.25;
/** ...and the memory store; the rest is more room for the garbage the two make. */
export const STORE_SHARE = 0.5;
/**
 * A request in flight holds five to eight times its body (its bytes, their parse, the base64 envelope, the bytes
 * sent): 40 bodies near 1 MiB raised the RSS by 246 MB. A body pool of N bytes is N times this in the budget.
 */
export const BODY_HOLDING_FACTOR = 8;
/** The heap a `serve` needs besides the store (18-21 MiB live under load), which the store can never have. */
export const HEAP_RESERVE_BYTES = 32 * MIB;
/**
 * The share of the old space beyond that reserve which the store may have: the rest is room for the garbage of the
 * requests at work. Measured with the image's flags (old space 192 MiB), a `serve` kept full of 8 KB answers: with the
 * store at 102 MiB the heap peaked at 142 MiB, at 163 MiB it ran out (docs/performance.md, "The memory store's budget").
 */
export const STORE_HEAP_SHARE = 0.6;
/** Shedding starts at this share of the limit (RSS) or of V8's heap limit (heap in use, garbage included)... */
export const HIGH_WATER_SHARE = 0.9;
/** ...and stops once both are back under this one. */
export const LOW_WATER_SHARE = 0.8;
/** The old space the heap flags give a process: this share of its limit (192 MiB of a 256 MiB pod). */
export const OLD_SPACE_SHARE = 0.75;
/** A body up to this size never waits for the egress pool: a payment is a few hundred bytes. */
export const EGRESS_FREE_BODY_BYTES = 4 * 1024;
/**
 * The largest postback body the receiver takes (413 past it). Spec 8 leaves payload sizes open; a postback is a few
 * hundred bytes, so the egress default is generous.
 */
export const POSTBACK_MAX_BODY_BYTES = 1_048_576;
/** A body up to this size never waits for the postback pool: a postback is a few hundred bytes. */
export const POSTBACK_FREE_BODY_BYTES = 16 * 1024;

/** What the process can use, as read at start. */
export interface ProcessMemory {
  /** The container's memory limit (cgroup v1 or v2, as libuv reads it); undefined when there is none. */
  readonly containerLimitBytes: number | undefined;
  /** V8's old-space limit (--max-old-space-size, or what V8 chose): where the store and every request live. */
  readonly oldSpaceBytes: number;
  /** V8's whole heap limit (the old space and the young generation): past it the process dies. */
  readonly heapLimitBytes: number;
}

export type LimitSource = 'setting' | 'container' | 'heap';

export interface MemoryBudget {
  /** The whole process's limit, and where it was read. */
  readonly limitBytes: number;
  readonly source: LimitSource;
  readonly oldSpaceBytes: number;
  readonly heapLimitBytes: number;
  readonly shares: {
    readonly runtime: number;
    readonly headroom: number;
    /** Both listeners' bodies in flight, each body counted BODY_HOLDING_FACTOR times. */
    readonly bodies: number;
    /** The memory store's `auto` budget (SIDECAR_STATE_MEMORY_MAX_MB). */
    readonly store: number;
  };
  /** The bytes of large bodies each listener holds at once beyond the free allowance (inbound/body-budget.ts). */
  readonly egressBodyPoolBytes: number;
  readonly postbackBodyPoolBytes: number;
  /** Listeners shed new work past either mark, and take it again once under both low-water marks. */
  readonly rssHighWaterBytes: number;
  readonly rssLowWaterBytes: number;
  readonly heapHighWaterBytes: number;
  readonly heapLowWaterBytes: number;
  /** The old space that fits this limit: node's --max-old-space-size, in MiB, for a process started by hand. */
  readonly fittingOldSpaceMb: number;
}

export interface BudgetInput {
  /** SIDECAR_MEMORY_LIMIT_MB: MiB, or `auto` (the container's limit, else derived from the heap). */
  readonly limitMb: number | 'auto';
  readonly process: ProcessMemory;
  /** SIDECAR_MAX_BODY_BYTES: the egress pool always holds one body at the limit. */
  readonly maxBodyBytes: number;
  /** The postback receiver's body limit: its pool always holds one body at it. */
  readonly maxPostbackBodyBytes: number;
}

/**
 * The limit in force: the setting, the container's, else the one the old space was sized for (as the heap flags
 * derive it from a limit), plus the runtime, which lives mostly outside the heap.
 */
function limitOf(input: BudgetInput): { readonly bytes: number; readonly source: LimitSource } {
  if (input.limitMb !== 'auto') return { bytes: input.limitMb * MIB, source: 'setting' };
  const container = input.process.containerLimitBytes;
  if (container !== undefined) return { bytes: container, source: 'container' };
  return { bytes: RUNTIME_BYTES + Math.floor(input.process.oldSpaceBytes / OLD_SPACE_SHARE), source: 'heap' };
}

export function memoryBudget(input: BudgetInput): MemoryBudget {
  const { bytes: limitBytes, source } = limitOf(input);
  const { oldSpaceBytes } = input.process;
  const headroom = Math.max(HEADROOM_MIN_BYTES, Math.floor(limitBytes * HEADROOM_SHARE));
  const left = Math.max(0, limitBytes - RUNTIME_BYTES - headroom);
  const bodyShare = Math.floor(left * BODIES_SHARE);
  const poolEach = Math.floor(bodyShare / 2 / BODY_HOLDING_FACTOR);
  const egressBodyPoolBytes = Math.max(poolEach, input.maxBodyBytes);
  const postbackBodyPoolBytes = Math.max(poolEach, input.maxPostbackBodyBytes);
  const bodies = (egressBodyPoolBytes + postbackBodyPoolBytes) * BODY_HOLDING_FACTOR;
  const storeOfHeap = Math.floor(Math.max(0, oldSpaceBytes - HEAP_RESERVE_BYTES) * STORE_HEAP_SHARE);
  const storeOfLimit = Math.floor(left * STORE_SHARE);
  const store = Math.max(MIB, Math.min(storeOfHeap, storeOfLimit));
  return {
    limitBytes,
    source,
    oldSpaceBytes,
    heapLimitBytes: input.process.heapLimitBytes,
    shares: { runtime: RUNTIME_BYTES, headroom, bodies, store },
    egressBodyPoolBytes,
    postbackBodyPoolBytes,
    // A limit derived from the heap is no measure of RSS (code and buffers live outside the heap): the heap's own
    // mark is the one that holds then.
    rssHighWaterBytes: source === 'heap' ? Number.MAX_SAFE_INTEGER : Math.floor(limitBytes * HIGH_WATER_SHARE),
    rssLowWaterBytes: source === 'heap' ? Number.MAX_SAFE_INTEGER : Math.floor(limitBytes * LOW_WATER_SHARE),
    heapHighWaterBytes: Math.floor(input.process.heapLimitBytes * HIGH_WATER_SHARE),
    heapLowWaterBytes: Math.floor(input.process.heapLimitBytes * LOW_WATER_SHARE),
    fittingOldSpaceMb: Math.floor((limitBytes * OLD_SPACE_SHARE) / MIB),
  };
}

/**
 * Refuses at start a limit that cannot hold the runtime, the headroom and the bodies in flight, with the numbers,
 * naming SIDECAR_MAX_BODY_BYTES when one body at it is what takes the bodies' share past the limit.
 */
export function checkBudgetFits(budget: MemoryBudget, settings: { limit: string; maxBodyBytes: string }): void {
  // A limit derived from the heap is no one's setting: the heap flags chose it.
  if (budget.source === 'heap') return;
  const needed = RUNTIME_BYTES + budget.shares.headroom + budget.shares.bodies + MIB;
  if (budget.limitBytes >= needed) return;
  const bodySetsPool = budget.egressBodyPoolBytes > budget.postbackBodyPoolBytes;
  throw new ConfigError(
    bodySetsPool ? settings.maxBodyBytes : settings.limit,
    `the memory limit (${mib(budget.limitBytes)} MiB, ${budget.source}) cannot hold the runtime (${mib(RUNTIME_BYTES)} MiB), headroom (${mib(budget.shares.headroom)} MiB) and bodies in flight (${mib(budget.shares.bodies)} MiB): at least ${mib(needed) + 1} MiB is needed`,
  );
}

/** The store's budget for SIDECAR_STATE_MEMORY_MAX_MB: `auto` is the store's share; a number must fit beside the rest. */
export function storeMaxBytes(setting: number | 'auto', budget: MemoryBudget, settingName: string): number {
  if (setting === 'auto') return budget.shares.store;
  const bytes = setting * MIB;
  const heapRoom = budget.oldSpaceBytes - HEAP_RESERVE_BYTES;
  if (bytes > heapRoom) {
    throw new ConfigError(
      settingName,
      `${String(setting)} MiB does not fit node's old space (${mib(budget.oldSpaceBytes)} MiB) beside the ${mib(HEAP_RESERVE_BYTES)} MiB the rest of the heap needs: the heap would run out before the store evicts; auto gives ${mib(budget.shares.store)} MiB`,
    );
  }
  const room = budget.limitBytes - RUNTIME_BYTES - budget.shares.headroom - budget.shares.bodies;
  if (bytes > room) {
    throw new ConfigError(
      settingName,
      `${String(setting)} MiB does not fit the memory limit (${mib(budget.limitBytes)} MiB, ${budget.source}) beside the runtime (${mib(RUNTIME_BYTES)} MiB), headroom (${mib(budget.shares.headroom)} MiB) and bodies in flight (${mib(budget.shares.bodies)} MiB): at most ${mib(room)} MiB; auto gives ${mib(budget.shares.store)} MiB`,
    );
  }
  return bytes;
}

const mib = (bytes: number): number => Math.floor(bytes / MIB);

/** A node flag's value in MiB, as given on the command line or in NODE_OPTIONS (the last one wins, as in node). */
function heapFlagMb(name: string, argv: readonly string[], nodeOptions: string): number | undefined {
  let value: number | undefined;
  for (const arg of [...nodeOptions.split(/\s+/), ...argv]) {
    const match = new RegExp(`^${name}[=](\\d+)$`).exec(arg.replaceAll('_', '-'));
    if (match?.[1] !== undefined) value = Number(match[1]);
  }
  return value;
}

/**
 * V8's old-space limit. With --max-old-space-size that value; without it V8 sizes both generations from the
 * memory it sees (the container's limit included), the young one as three semi-spaces of 1/128 of the old one,
 * between 1 and 16 MiB: the heap limit less those.
 */
export function oldSpaceBytes(
  heapLimitBytes: number = getHeapStatistics().heap_size_limit,
  argv: readonly string[] = process.execArgv,
  nodeOptions: string = process.env.NODE_OPTIONS ?? '',
): number {
  const flagged = heapFlagMb('--max-old-space-size', argv, nodeOptions);
  if (flagged !== undefined) return flagged * MIB;
  const semiSpace = Math.min(16 * MIB, Math.max(MIB, heapLimitBytes / 128));
  return Math.floor(heapLimitBytes - 3 * semiSpace);
}

/**
 * The container's memory limit: libuv reads the cgroup (v1 memory.limit_in_bytes or v2 memory.max) of this
 * process. No limit reads as 0 or as a number beyond the host's memory (v1's "unlimited" is 2^63 rounded to pages).
 */
export function containerLimitBytes(
  constrained: number = process.constrainedMemory(),
  hostBytes: number = totalmem(),
): number | undefined {
  return constrained > 0 && constrained < hostBytes ? constrained : undefined;
}

/** The figures of this process, read now. */
export function readProcessMemory(): ProcessMemory {
  return {
    containerLimitBytes: containerLimitBytes(),
    oldSpaceBytes: oldSpaceBytes(),
    heapLimitBytes: getHeapStatistics().heap_size_limit,
  };
}

/** The store's `auto` share for this process with the default settings: a store built without settings (tests). */
export function defaultStoreBytes(): number {
  const budget = memoryBudget({
    limitMb: 'auto',
    process: readProcessMemory(),
    maxBodyBytes: POSTBACK_MAX_BODY_BYTES,
    maxPostbackBodyBytes: POSTBACK_MAX_BODY_BYTES,
  });
  return budget.shares.store;
}
