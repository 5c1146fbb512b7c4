// The receiver's memory on the StateStore (in memory for one pod, Redis for a fleet): which nonces were seen,
// which payloads were delivered, and which payload is being delivered right now. Every method may reject with
// StateStoreUnavailableError; the handler then answers 503 so that the gateway redelivers (never delivered
// without the check).
import type { StateStore } from '../state/state-store.js';
import { isoTimestamp } from '../time/utc-time.js';

/** A delivery's claim outlives its timeout by this much, so that a crashed replica's claim still expires soon. */
const CLAIM_MARGIN_MS = 5_000;

export interface ReplayMemoryOptions {
  readonly nonceTtlMs: number;
  readonly deliveredTtlMs: number;
  /** SIDECAR_POSTBACK_FORWARD_TIMEOUT_MS: the longest one delivery to the application takes. */
  readonly deliveryTimeoutMs: number;
  /** The store's command timeout (0 in memory): the claim and the delivered record are each one command. */
  readonly storeCommandTimeoutMs?: number;
}

export type Claim =
  /** This request delivers the payload; release() or delivered() afterwards. */
  | { readonly kind: 'claimed' }
  /** Delivered before: answer 200 without delivering it again. */
  | { readonly kind: 'delivered' }
  /** Another request (on this replica or another) is delivering it now. */
  | { readonly kind: 'in_flight' };

const nonceKey = (nonce: string) => `postback:nonce:${nonce}`;
const deliveredKey = (digest: string) => `postback:delivered:${digest}`;
const inFlightKey = (digest: string) => `postback:inflight:${digest}`;

export class ReplayMemory {
  constructor(
    private readonly store: StateStore,
    private readonly options: ReplayMemoryOptions,
  ) {}

  /**
   * Records a verified nonce (never an unverified one: a forged request must not burn a real nonce); true when it
   * was new. The nonce is signed together with the data, so a nonce seen again carries the same payload: whether
   * it is delivered is decided by that payload's delivered state, like any redelivery.
   */
  recordNonce(nonce: string, digest: string): Promise<boolean> {
    return this.store.setIfAbsent(nonceKey(nonce), digest, this.options.nonceTtlMs);
  }

  /**
   * Claims the payload for delivering. The claim comes first and the delivered check second, so that a copy
   * whose delivery finished between the two is still seen as delivered.
   */
  async claim(digest: string, owner: string): Promise<Claim> {
    // The claim must outlive everything between its own write and the delivered record's: the delivery, and the
    // store commands around it (each up to the command timeout), or a redelivery could be delivered meanwhile.
    const ttl = this.options.deliveryTimeoutMs + 2 * (this.options.storeCommandTimeoutMs ?? 0) + CLAIM_MARGIN_MS;
    // Pinned: evicted while the delivery runs, a redelivery would be delivered beside it. Nonces and delivered
    // digests are not: under pressure they go oldest first with the idempotency answers (docs/postbacks.md).
    const claimed = await this.store.setIfAbsent(inFlightKey(digest), owner, ttl, { pinned: true });
    let delivered: boolean;
    try {
      delivered = (await this.store.get(deliveredKey(digest))) !== undefined;
    } catch (err) {
      // Not left claimed until its TTL: the gateway's redelivery should find it free.
      if (claimed) await this.release(digest, owner).catch(() => undefined);
      throw err;
    }
    if (claimed && delivered) await this.release(digest, owner);
    if (delivered) return { kind: 'delivered' };
    return claimed ? { kind: 'claimed' } : { kind: 'in_flight' };
  }

  /** After a 2xx from the application: redeliveries within the TTL get 200 without a second delivery. */
  async delivered(digest: string, owner: string): Promise<void> {
    await this.store.setIfAbsent(deliveredKey(digest), isoTimestamp(Date.now()), this.options.deliveredTtlMs);
    await this.release(digest, owner);
  }

  /** After a failed delivery: nothing is recorded, so the gateway's redelivery goes through. */
  async release(digest: string, owner: string): Promise<void> {
    await this.store.compareAndDelete(inFlightKey(digest), owner);
  }
}
