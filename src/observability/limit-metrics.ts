import { Counter, Gauge, type Registry } from 'prom-client';
import { METRICS } from './metric-names.js';

export type LimitModeLabel = 'enforce' | 'report';

/** One window's use, 0 to 1 (past 1: report mode let more through). */
export interface WindowUse {
  readonly rule: string;
  readonly window: string;
  readonly ratio: number;
}

/**
 * The money limits' metrics (docs/limits.md). The use ratios are read at each scrape from whoever holds them (the
 * limit guard, from the store: the fleet's use on Redis), so they fall as a window's payments age out with no payment
 * made; a scrape while the store is away keeps the last figures.
 */
export class LimitMetrics {
  private readonly refusals: Counter<'rule' | 'mode'>;
  private useSource: () => Promise<readonly WindowUse[]> = () => Promise.resolve([]);

  constructor(registry: Registry) {
    this.refusals = new Counter({
      name: METRICS.limitRefusals,
      help: 'Payments a money limit refused (enforce: 403, nothing sent) or would have refused (report: sent), by rule.',
      labelNames: ['rule', 'mode'] as const,
      registers: [registry],
    });
    const use = new Gauge({
      name: METRICS.limitUseRatio,
      help: "How much of a money limit's window is used (0 to 1), by rule and window; the fleet's use on Redis.",
      labelNames: ['rule', 'window'] as const,
      registers: [registry],
      collect: async (): Promise<void> => {
        const figures = await this.useSource().catch(() => undefined);
        if (figures === undefined) return;
        use.reset();
        for (const { rule, window, ratio } of figures) use.set({ rule, window }, ratio);
      },
    });
  }

  /** The rules in use: their refusal series at zero, so that the alerts' increase() sees the first refusal. */
  rulesInUse(rules: readonly { readonly name: string; readonly mode: LimitModeLabel }[]): void {
    for (const { name, mode } of rules) this.refusals.inc({ rule: name, mode }, 0);
  }

  refused(rule: string, mode: LimitModeLabel): void {
    this.refusals.inc({ rule, mode });
  }

  /** Where the use ratios come from: read at each scrape. */
  readUseFrom(source: () => Promise<readonly WindowUse[]>): void {
    this.useSource = source;
  }
}
