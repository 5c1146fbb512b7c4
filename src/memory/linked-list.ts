// The requests in flight of a listener, and their deadlines, are kept in insertion order with constant-time removal.
//
// Not in a Set: entries that come and go leave deleted slots in a Set's table until V8 rebuilds it, every few dozen
// additions, and V8 keeps the entries of each table it replaced (for iterators still on it); a long-lived Set's new
// table goes straight to the old generation. Each young-generation collection takes every pointer out of the old
// generation as live, so every request such a dead table held stayed alive until the next full collection: under load
// the sidecar promoted some 3 KB a request and spent twice the floor's time collecting (docs/performance.md, "Garbage
// collection"). A link is one small object, unlinked on removal, and it lets go of its value then: V8 may allocate
// such small objects straight in the old generation once most of them survive (allocation-site pretenuring, under
// load), and a dead old link that still named its request would keep it alive just the same.

/** An entry's place in the list: what add() returns and remove() takes. */
export interface Link<T> {
  /** Undefined once removed: a removed link may live on (in the old generation) and must not keep its value. */
  value: T | undefined;
  /** A number the list's user keeps with the entry (the deadline list: when it falls due). */
  readonly at: number;
  previous: Link<T> | undefined;
  next: Link<T> | undefined;
  listed: boolean;
}

export class LinkedList<T> {
  private head: Link<T> | undefined;
  private tail: Link<T> | undefined;
  private count = 0;

  get size(): number {
    return this.count;
  }

  /** The entry added first of those still listed. */
  get first(): Link<T> | undefined {
    return this.head;
  }

  add(value: T, at = 0): Link<T> {
    const link: Link<T> = { value, at, previous: this.tail, next: undefined, listed: true };
    if (this.tail === undefined) this.head = link;
    else this.tail.next = link;
    this.tail = link;
    this.count++;
    return link;
  }

  /** Unlinks the entry and lets go of its value. Once is enough; again does nothing. */
  remove(link: Link<T>): void {
    if (!link.listed) return;
    link.listed = false;
    const { previous, next } = link;
    if (previous === undefined) this.head = next;
    else previous.next = next;
    if (next === undefined) this.tail = previous;
    else next.previous = previous;
    link.previous = link.next = link.value = undefined;
    this.count--;
  }

  /** The values listed now, in insertion order: a copy, which removals do not change. */
  values(): T[] {
    const values: T[] = [];
    for (let link = this.head; link !== undefined; link = link.next)
      if (link.value !== undefined) values.push(link.value);
    return values;
  }
}
