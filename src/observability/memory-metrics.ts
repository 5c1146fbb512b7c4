// The memory budget and what guards it (docs/operations.md, "Memory" and "Connections"): the budget's shares, how
// near the process is to it, the work shed past its high-water mark, and the connections and requests the connection
// policy refused, by listener and reason.
import { Counter, Gauge, type Registry } from 'prom-client';
import { CONNECTION_REFUSALS, type ConnectionRefusal } from '../inbound/connection-policy.js';
import type { MemoryBudget } from '../memory/budget.js';
import { METRICS } from './metric-names.js';

/** The sidecar's listeners: the `listener` label. */
export const LISTENERS = ['egress', 'postback', 'admin'] as const;
export type ListenerName = (typeof LISTENERS)[number];

/** What the pressure gauges read at scrape time. */
export interface PressureState {
  readonly overloaded: boolean;
  readonly ratio: number;
}

export class MemoryMetrics {
  private readonly refused: Counter<'listener' | 'reason'>;
  private readonly shed: Counter<'listener'>;
  private readonly budgetBytes: Gauge<'share'>;
  private pressure: PressureState = { overloaded: false, ratio: 0 };

  constructor(registry: Registry) {
    this.refused = new Counter({
      name: METRICS.connectionsRefused,
      help: 'Connections and requests refused by the connection policy, by listener and reason (connections, per_source, pipelined, timeout, headers_too_large, malformed, idle).',
      labelNames: ['listener', 'reason'] as const,
      registers: [registry],
    });
    for (const listener of LISTENERS) {
      for (const reason of CONNECTION_REFUSALS) this.refused.inc({ listener, reason }, 0);
    }
    this.shed = new Counter({
      name: METRICS.requestsShed,
      help: 'Requests refused because the process was past its memory high-water mark, by listener.',
      labelNames: ['listener'] as const,
      registers: [registry],
    });
    for (const listener of LISTENERS) this.shed.inc({ listener }, 0);
    this.budgetBytes = new Gauge({
      name: METRICS.memoryBudgetBytes,
      help: 'The memory budget (share=limit) and its shares (runtime, headroom, bodies, store), in bytes.',
      labelNames: ['share'] as const,
      registers: [registry],
    });
    const ratio: Gauge = new Gauge({
      name: METRICS.memoryPressureRatio,
      help: 'The larger of RSS against the memory limit and heap in use against the heap limit, at the last look.',
      registers: [registry],
      collect: (): void => ratio.set(this.pressure.ratio),
    });
    const shedding: Gauge = new Gauge({
      name: METRICS.memoryShedding,
      help: '1 while the listeners shed new work (past the high-water mark), else 0.',
      registers: [registry],
      collect: (): void => shedding.set(this.pressure.overloaded ? 1 : 0),
    });
  }

  /** The budget in force, and where the pressure gauges read from. */
  track(budget: MemoryBudget, pressure: PressureState): void {
    this.pressure = pressure;
    this.budgetBytes.set({ share: 'limit' }, budget.limitBytes);
    for (const [share, bytes] of Object.entries(budget.shares)) this.budgetBytes.set({ share }, bytes);
  }

  connectionRefused(listener: ListenerName, reason: ConnectionRefusal): void {
    this.refused.inc({ listener, reason });
  }

  requestShed(listener: ListenerName): void {
    this.shed.inc({ listener });
  }
}
