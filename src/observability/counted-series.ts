import type { Counter } from 'prom-client';

interface Cell {
  readonly labels: Record<string, string>;
  pending: number;
}

/** One map per label, by its value; the last label's map holds the series. */
type Level = Map<string, Level | Cell>;

/**
 * A labelled counter of the request path, counted in a plain number per series and added to prom-client's counter
 * when /metrics is read (its `collect`). prom-client builds a label object's hash string on every inc(); on the
 * request path that was a few hundred bytes of garbage per request for each counter. Here a series is found
 * through one map per label, by the values as they are, and made once; its label object is built with it.
 */
export class CountedSeries<L extends string> {
  private readonly root: Level = new Map();
  private readonly cells: Cell[] = [];

  constructor(
    private readonly counter: Counter<L>,
    /** The counter's label names, in the order inc() takes their values. */
    private readonly labelNames: readonly L[],
  ) {}

  /** Counts one for the series of these label values, in labelNames' order (two or three labels). */
  inc(first: string, second: string, third = ''): void {
    const byFirst = this.root.get(first) ?? this.add(this.root, first, new Map<string, Level>());
    const bySecond = (byFirst as Level).get(second) ?? this.add(byFirst as Level, second, new Map<string, Cell>());
    const cell =
      (bySecond as Level).get(third) ?? this.add(bySecond as Level, third, this.newCell(first, second, third));
    (cell as Cell).pending++;
  }

  /** Adds what was counted since the last call to the counter: its `collect`, run before each read. */
  flush(): void {
    for (const cell of this.cells) {
      if (cell.pending === 0) continue;
      this.counter.inc(cell.labels as Partial<Record<L, string>>, cell.pending);
      cell.pending = 0;
    }
  }

  private add<T extends Level | Cell>(level: Level, value: string, entry: T): T {
    level.set(value, entry);
    return entry;
  }

  private newCell(...values: readonly string[]): Cell {
    const cell = { labels: Object.fromEntries(this.labelNames.map((name, i) => [name, values[i] ?? ''])), pending: 0 };
    this.cells.push(cell);
    return cell;
  }
}
