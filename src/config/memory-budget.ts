// The memory store's byte budget (SIDECAR_STATE_MEMORY_MAX_MB), derived from V8's heap limit when not set: the
// store must be full, and evict, before the heap is (docs/performance.md, "The memory store's budget"). Read by the
// settings (state-settings.ts) and by the store itself when a test builds one without settings.
import { getHeapStatistics } from 'node:v8';

export const MIB = 1024 * 1024;

/**
 * The heap the process needs whatever its store holds: its code and modules and the requests at work (18-21 MiB
 * live in a `serve` under load, docs/performance.md "The memory store's budget"), and the young generation, which
 * the heap limit counts but the store never lives in (12 MiB with the image's --max-semi-space-size=4).
 */
export const MEMORY_STORE_HEAP_RESERVE = 32 * MIB;
/**
 * The share of the heap beyond that reserve which `auto` gives the store; the rest is room for the garbage of the
 * requests at work, so that V8 is not collecting again as soon as it has collected. Measured with the image's flags
 * (heap limit 204 MiB), a `serve` kept full of 8 KB answers by 32 callers: with the store at 102 MiB the heap peaked
 * at 142 MiB, with it at 133 MiB at 160 MiB, at 163 MiB it ran out of heap (SIGABRT) with 153 MiB stored. This
 * share gives 103 MiB there.
 */
export const MEMORY_STORE_HEAP_SHARE = 0.6;
/**
 * A budget set above this share of the heap beyond the reserve is warned about at start: in the same runs 0.77
 * (133 MiB) held, 0.95 (163 MiB) did not.
 */
export const MEMORY_STORE_HEAP_SHARE_WARNED = 0.8;

/** V8's heap limit in this process (--max-old-space-size plus the young generation), in bytes. */
export function heapLimitBytes(): number {
  return getHeapStatistics().heap_size_limit;
}

/** `share` of the heap beyond MEMORY_STORE_HEAP_RESERVE, in bytes. */
export function heapForStore(heapLimit: number, share: number): number {
  return Math.floor(Math.max(0, heapLimit - MEMORY_STORE_HEAP_RESERVE) * share);
}

/** The store's budget in bytes: the setting (MiB), or `auto`, at least 1 MiB. */
export function memoryStoreMaxBytes(setting: number | 'auto', heapLimit: number = heapLimitBytes()): number {
  return setting === 'auto' ? Math.max(MIB, heapForStore(heapLimit, MEMORY_STORE_HEAP_SHARE)) : setting * MIB;
}
