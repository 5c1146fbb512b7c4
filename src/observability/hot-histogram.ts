import { Histogram, type Registry } from 'prom-client';

type Exported<L extends string> = Awaited<ReturnType<Histogram<L>['get']>>;
type ExportedValue<L extends string> = Exported<L>['values'][number];

/** One label set's counts: observing is a bucket search and three additions, with nothing allocated. */
export class HotSeries {
  /** counts[i] holds the observations in (bounds[i-1], bounds[i]]; the last slot those above every bound. */
  readonly counts: Float64Array;
  sum = 0;
  count = 0;

  constructor(
    private readonly bounds: readonly number[],
    readonly labels: Readonly<Record<string, string>>,
  ) {
    this.counts = new Float64Array(bounds.length + 1);
  }

  clear(): void {
    this.counts.fill(0);
    this.sum = 0;
    this.count = 0;
  }

  observe(value: number): void {
    let i = 0;
    while (i < this.bounds.length && value > (this.bounds[i] as number)) i++;
    (this.counts[i] as number)++;
    this.sum += value;
    this.count++;
  }
}

/**
 * A Histogram for the request path. prom-client's own observe() builds a label hash string, validates the
 * labels and turns the bucket bound into a property key on every call (about 0.35 us and several allocations,
 * three times per request); here each label set is bound once to a HotSeries. The registry renders it through
 * get() exactly as it renders a prom-client Histogram (cumulative _bucket series with `le`, then _sum, _count).
 * Observations go through series() only: the inherited observe() would write to a map this class never exports.
 */
export class HotHistogram<L extends string> extends Histogram<L> {
  private readonly bounds: readonly number[];
  private readonly bySeries = new Map<string, HotSeries>();

  constructor(config: { name: string; help: string; labelNames: readonly L[]; buckets: readonly number[]; registry: Registry }) {
    super({ name: config.name, help: config.help, labelNames: config.labelNames, buckets: [...config.buckets], registers: [config.registry] });
    this.bounds = [...config.buckets].sort((a, b) => a - b);
  }

  /** The series of one label set, created at zero on first use; callers keep it for the hot path. */
  series(labels: Readonly<Record<L, string>>): HotSeries {
    const key = JSON.stringify(labels);
    let series = this.bySeries.get(key);
    if (series === undefined) {
      series = new HotSeries(this.bounds, labels);
      this.bySeries.set(key, series);
    }
    return series;
  }

  /** Registry.resetMetrics() lands here: every bound series goes back to zero and stays exported. */
  override reset(): void {
    super.reset();
    // prom-client's constructor calls reset() before this class's own fields exist.
    const bound = this.bySeries as Map<string, HotSeries> | undefined;
    if (bound) for (const series of bound.values()) series.clear();
  }

  override get(): Promise<Exported<L>> {
    return Promise.resolve(this.exportSeries());
  }

  /**
   * The registry's text output prefers this method when a metric has it (prom-client's Histogram does, for its
   * shared-label form); without this override it would render the base class's empty series map.
   */
  getForPromString(): Promise<Exported<L>> {
    return Promise.resolve(this.exportSeries());
  }

  private exportSeries(): Exported<L> {
    // prom-client sets these on every metric; its typings leave them out (and list a `collect` it never returns).
    const { name, help, type, aggregator } = this as unknown as { name: string; help: string; type: unknown; aggregator: unknown };
    const values: ExportedValue<L>[] = [];
    for (const series of this.bySeries.values()) {
      let cumulative = 0;
      this.bounds.forEach((bound, i) => {
        cumulative += series.counts[i] as number;
        values.push(exported({ le: bound, ...series.labels }, cumulative, `${name}_bucket`));
      });
      values.push(exported({ le: '+Inf', ...series.labels }, series.count, `${name}_bucket`));
      values.push(exported(series.labels, series.sum, `${name}_sum`));
      values.push(exported(series.labels, series.count, `${name}_count`));
    }
    return { name, help, type, aggregator, values } as Exported<L>;
  }
}

function exported<L extends string>(labels: Record<string, string | number>, value: number, metricName: string): ExportedValue<L> {
  // The `le` label is not part of L; prom-client's own Histogram exports it the same way.
  return { labels: labels as ExportedValue<L>['labels'], value, metricName };
}
