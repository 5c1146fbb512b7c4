// Deadlines of one length on one timer: the request deadlines of a listener (egress/request.ts) and the response
// timeouts of the gateway's sends (upstream/send-handler.ts). A timer per request was a Timeout object and a closure
// each, 0.2-0.4 KB of heap a request (docs/performance.md); a list entry is one small object.

import { LinkedList, type Link } from '../memory/linked-list.js';

/** What a deadline ends: expire() is called when its time is up. */
export interface Expiring {
  expire(): void;
}

/**
 * An entry's place among the deadlines (`at`: its performance.now() due time): what add() returns and remove()
 * takes.
 */
export type Deadline = Link<Expiring>;

/**
 * Every entry gets the same time from when it is added, so they fall due in the order they were added: a list in
 * that order is in deadline order, and only its first entry needs a timer. The timer is not cancelled when the list
 * empties: it fires once, finds nothing due, and is made again by the next entry.
 */
export class DeadlineList {
  private readonly list = new LinkedList<Expiring>();
  private timer: NodeJS.Timeout | undefined;
  private readonly fire: () => void;

  constructor(readonly deadlineMs: number) {
    const fire = (): void => {
      this.timer = undefined;
      const now = performance.now();
      for (let due = this.list.first; due !== undefined && due.at <= now; due = this.list.first) {
        const item = due.value;
        this.list.remove(due);
        item?.expire();
      }
      // An expire() may have added an entry, and armed the timer for it.
      const next = this.list.first;
      if (next !== undefined && this.timer === undefined) this.arm(next.at - now);
    };
    this.fire = fire;
  }

  /** From now, `item` has deadlineMs until its deadline is removed. */
  add(item: Expiring): Deadline {
    const deadline = this.list.add(item, performance.now() + this.deadlineMs);
    if (this.timer === undefined) this.arm(this.deadlineMs);
    return deadline;
  }

  /** The item is done (or expired): its deadline no longer applies. Once is enough; again does nothing. */
  remove(deadline: Deadline): void {
    this.list.remove(deadline);
  }

  private arm(ms: number): void {
    this.timer = setTimeout(this.fire, ms).unref();
  }
}
