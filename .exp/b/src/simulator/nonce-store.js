export const NONCE_WINDOW_SECONDS = 95;
export function createNonceStore(clock, windowSeconds = NONCE_WINDOW_SECONDS) {
    const byVendor = new Map();
    let lastPruneMs = 0;
    // Pruning at most once a second keeps claims O(1) on average while bounding memory to one window of traffic.
    const prune = (now) => {
        if (now - lastPruneMs < 1000)
            return;
        lastPruneMs = now;
        for (const [vendor, nonces] of byVendor) {
            for (const [nonce, expiresAt] of nonces)
                if (expiresAt <= now)
                    nonces.delete(nonce);
            if (nonces.size === 0)
                byVendor.delete(vendor);
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
            if (expiresAt !== undefined && expiresAt > now)
                return false;
            nonces.set(nonce, now + windowSeconds * 1000);
            return true;
        },
        size: () => [...byVendor.values()].reduce((n, m) => n + m.size, 0),
    };
}
