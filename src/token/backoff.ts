/** Capped exponential backoff with full jitter (AWS architecture blog): spreads replicas that fail together. */
export function backoffDelayMs(
  attempt: number,
  baseMs: number,
  capMs: number,
  random: () => number = Math.random,
): number {
  const ceiling = Math.min(capMs, baseMs * 2 ** Math.max(0, attempt));
  return Math.max(baseMs / 2, Math.floor(random() * ceiling));
}
