import type { GrantResult } from './token-set.js';

/**
 * The held token as the grant decision sees it. `refresh`: none (no token held), alive (never sent, not about to
 * expire), spent (handed to the network: never sent again, spec 4.1 rule 1) or expired.
 */
export interface HeldState {
  /** Requests can still use the access token (not rejected, not about to expire). */
  readonly accessUsable: boolean;
  readonly refresh: 'none' | 'alive' | 'spent' | 'expired';
  /** A password login was sent too recently (this replica's own cooldown, or the fleet's). */
  readonly loginCoolingDown: boolean;
  /**
   * Fleet mode: the gateway refused this refresh token lately (this replica's refresh, or another's as the record
   * says), and another replica may hold its successor (it rotated the token: refreshed alone while the store was
   * away, or through the fleet while this one was away). Absent: false (a single pod, or looked again already).
   */
  readonly successorMayBeShared?: boolean;
}

/**
 * Why a token is asked for. renew: a new one is needed (none held, refresh ahead of expiry, a 401, a retry).
 * store-away: the fleet's store did not answer. refresh-unsent: the refresh just tried never left this process.
 * refresh-refused: the gateway refused the refresh just sent.
 */
export type GrantReason = 'renew' | 'store-away' | 'refresh-unsent' | 'refresh-refused';

/**
 * refresh or login: that grant now. keep: go on with the token held (retry later). wait: no grant may be made now.
 * look-again: read the fleet's record again (waiting a little for it to move) before a password login.
 */
export type GrantDecision = 'refresh' | 'login' | 'keep' | 'wait' | 'look-again';

/**
 * When to refresh, log in, keep the held token or wait: the one rule for this replica's own grants and for the
 * fleet's. A password login invalidates every access token issued before it (spec 4.1 rule 3), so a token that
 * still works is kept rather than replaced by a login; a refresh token is sent at most once.
 */
export function decideGrant(held: HeldState, reason: GrantReason): GrantDecision {
  // A refusal in a fleet is most often a rotation: another replica refreshed the same token (one of them alone,
  // while the store was away) and shares the successor when it can. A login now would revoke that successor and
  // every replica's token with it (spec 4.1 rule 3): the fleet's record first, then the login rule 2 asks for.
  if (held.successorMayBeShared === true && held.refresh !== 'alive') return 'look-again';
  // The store away: refreshing now would spend the fleet's refresh token behind the other replicas' backs; the
  // token is used until it is about to expire (refreshing ahead is a preference, not a need). Gateway unreachable
  // before the refresh left: retry it later rather than log everyone out.
  if ((reason === 'store-away' || reason === 'refresh-unsent') && held.accessUsable) return 'keep';
  // A refresh token is sent once: not again right after it failed to leave, nor after it was refused.
  if ((reason === 'renew' || reason === 'store-away') && held.refresh === 'alive') return 'refresh';
  return held.loginCoolingDown ? 'wait' : 'login';
}

/** How a source records that a refresh token was handed to the network, and lifts that mark. */
export interface SpentMark {
  /** Marks it spent; false: it could not be marked (the fleet's record moved), so it is not sent. */
  mark(): Promise<boolean>;
  /** Lifts the mark; false: it could not be lifted (the record moved meanwhile). */
  unmark(): Promise<boolean>;
}

export interface RefreshAttempt {
  readonly result: GrantResult;
  /** The request was never written and the spent mark is lifted: the refresh token may be sent later. */
  readonly unmarked: boolean;
}

/**
 * The one way a refresh token is sent: marked spent before it is handed to the network, so that whatever happens
 * next (no answer, this process or its lock lost) it is never sent again, and the mark lifted only when the request
 * provably never left (`sent: false`). undefined: it could not be marked, and was not sent.
 */
export async function sendRefresh(
  spent: SpentMark,
  send: () => Promise<GrantResult>,
): Promise<RefreshAttempt | undefined> {
  if (!(await spent.mark())) return undefined;
  const result = await send();
  const neverLeft = result.kind === 'failed' && !result.sent;
  return { result, unmarked: neverLeft && (await spent.unmark()) };
}

/** The error a source throws when its login is refused or fails. */
export function loginError(login: Exclude<GrantResult, { kind: 'granted' }>): Error {
  return new Error(login.kind === 'rejected' ? `login rejected (${login.status} ${login.code ?? ''})` : login.reason);
}
