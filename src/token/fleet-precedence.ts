import { issuedLater, sameTokens, type SharedTokenRecord } from './shared-token-record.js';

/**
 * What the replica holds when it asks for a new token. `local`: got on its own while the store was away (its
 * generation means nothing to the fleet). `usable`: its access token still works (not rejected, not expiring).
 */
export interface Basis {
  readonly held: SharedTokenRecord | undefined;
  readonly local: boolean;
  readonly usable: boolean;
}

/** Whether a record's access token can still be used for a while, by the gateway's clock. */
export type AccessUsable = (record: SharedTokenRecord) => boolean;

/** A record with a usable token that replaces what the replica holds (the generation moved). */
export function superseding(
  record: SharedTokenRecord | undefined,
  basis: Basis,
  accessUsable: AccessUsable,
): SharedTokenRecord | undefined {
  if (!record || !accessUsable(record)) return undefined;
  const { held } = basis;
  if (!held) return record;
  // The same tokens under a new number (a replica re-shared them) do not help a replica whose token was refused.
  if (!basis.usable && sameTokens(record, held)) return undefined;
  // A newer generation, or newer tokens under a lower one: a Redis that came back empty starts counting again
  // from whichever replica shared its token first (rejoin).
  const moved = basis.local
    ? !issuedLater(held, record)
    : record.generation > held.generation || (!sameTokens(record, held) && issuedLater(record, held));
  return moved ? record : undefined;
}

/**
 * On rejoining the fleet, without a gateway call: the store's record to adopt, 'keep' what is held, or 'share'
 * the replica's own token (the store holds none, a dead one or an older chain).
 */
export function rejoinChoice(
  record: SharedTokenRecord | undefined,
  basis: Basis,
  accessUsable: AccessUsable,
): SharedTokenRecord | 'keep' | 'share' {
  const own = basis.usable ? basis.held : undefined;
  if (record && accessUsable(record) && (!own || !issuedLater(own, record))) {
    // Numbers alone do not say it: after Redis came back empty, a replica shares its own token under a number
    // the others may hold for an older one.
    const same =
      basis.held !== undefined &&
      !basis.local &&
      basis.held.generation === record.generation &&
      sameTokens(record, basis.held);
    return same ? 'keep' : record;
  }
  // Never the store's own tokens again: that would only bump the generation, and would drop the spent mark of a
  // holder that sent their refresh token and vanished (a replica whose clock estimate moved sees them dead first).
  return own && !sameTokens(record, own) ? 'share' : 'keep';
}
