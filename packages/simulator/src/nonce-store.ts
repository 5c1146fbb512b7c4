// Per-vendor memory of used nonces (spec 5.2: once per vendor, remembered about 95 s).
// `claim` checks and records in one synchronous step, so two copies of a request racing through the async
// signature check cannot both be accepted.
import type { SimClock } from './clock.js';

export const NONCE_WINDOW_SECONDS = 95;

export interface NonceStore {
  /** True when the nonce was fresh (and is now recorded); false when it is a replay within the window. */
  claim(username: string, nonce: string): boolean;
  size(): number;
}

export function createNonceStore(clock: SimClock, windowSeconds = NONCE_WINDOW_SECONDS): NonceStore {
  const byVendor = new Map<string, Map<string, number>>();
  let lastPruneMs = 0;

  // Pruning at most once a second keeps claims O(1) on average while bounding memory to one window of traffic.
  const prune = (now: number): void => {
    if (now - lastPruneMs < 1000) return;
    lastPruneMs = now;
    for (const [vendor, nonces] of byVendor) {
      for (const [nonce, expiresAt] of nonces) if (expiresAt <= now) nonces.delete(nonce);
      if (nonces.size === 0) byVendor.delete(vendor);
    }
  };

  return {
    claim(username, nonce) {
      const now = clock.nowMs();
      prune(now);
      let nonces = byVendor.get(username);
      if (nonces === undefined) {
        nonces = new Map();
        byVendor.set(username, nonces);
      }
      const expiresAt = nonces.get(nonce);
      if (expiresAt !== undefined && expiresAt > now) return false;
      nonces.set(nonce, now + windowSeconds * 1000);
      return true;
    },
    size: () => [...byVendor.values()].reduce((n, m) => n + m.size, 0),
  };
}
