// The requests in flight of a listener, and their deadlines, are kept in insertion order with constant-time removal.
//
// Not in a Set: entries that come and go leave deleted slots in a Set's table until V8 rebuilds it, every few dozen
// additions, and V8 keeps the entries of each table it replaced (for iterators still on it); a long-lived Set's new
// table goes straight to the old generation. Each young-generation collection takes every pointer out of the old
// generation as live, so every request such a dead table held stayed alive until the next full collection: under load
// the sidecar promoted some 3 KB a request and spent twice the floor's time collecting (docs/performance.md, "Garbage
// collection"). A link is one small object, unlinked on removal.

/** An entry's place in the list: what add() returns and remove() takes. */
export interface Link<T> {
  readonly value: T;
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

  add(value: T): Link<T> {
    const link: Link<T> = { value, previous: this.tail, next: undefined, listed: true };
    if (this.tail === undefined) this.head = link;
    else this.tail.next = link;
    this.tail = link;
    this.count++;
    return link;
  }

  /** Once is enough; again does nothing. */
  remove(link: Link<T>): void {
    if (!link.listed) return;
    link.listed = false;
    const { previous, next } = link;
    if (previous === undefined) this.head = next;
    else previous.next = next;
    if (next === undefined) this.tail = previous;
    else next.previous = previous;
    link.previous = link.next = undefined;
    this.count--;
  }

  /** The values listed now, in insertion order: a copy, which removals do not change. */
  values(): T[] {
    const values: T[] = [];
    for (let link = this.head; link !== undefined; link = link.next) values.push(link.value);
    return values;
  }
}
