// Whether the process is near its memory budget (budget.ts), looked at every SAMPLE_MS: past the high-water mark of
// RSS (against the limit) or of the heap in use (against V8's heap limit), every listener refuses new work with a
// clear answer instead of taking it into a heap that would run out: the egress listener 503 sidecar.overloaded
// (nothing sent), the postback receiver 503 (the gateway delivers again), the admin listener makes one metrics page
// at a time. Under both low-water marks it takes work again by itself.
import { getHeapStatistics } from 'node:v8';
import type { MemoryBudget } from './budget.js';

/** Often enough that a flood is met within a fraction of a second; a look costs some 20 µs. */
export const SAMPLE_MS = 100;

export interface MemoryReading {
  readonly rssBytes: number;
  readonly heapUsedBytes: number;
}

function readNow(): MemoryReading {
  return { rssBytes: process.memoryUsage.rss(), heapUsedBytes: getHeapStatistics().used_heap_size };
}

export class MemoryPressure {
  private shedding = false;
  private last: MemoryReading = { rssBytes: 0, heapUsedBytes: 0 };
  private timer: NodeJS.Timeout | undefined;

  constructor(
    private readonly budget: MemoryBudget,
    private readonly onChange: (overloaded: boolean, reading: MemoryReading) => void = () => undefined,
    private readonly read: () => MemoryReading = readNow,
  ) {}

  /** True while listeners shed new work. */
  get overloaded(): boolean {
    return this.shedding;
  }

  /** The larger of RSS against the limit and heap in use against the heap limit, at the last look (0 to 1 and up). */
  get ratio(): number {
    // A limit derived from the heap says nothing of RSS (budget.ts): only the heap counts then.
    const rss = this.budget.source === 'heap' ? 0 : this.last.rssBytes / this.budget.limitBytes;
    return Math.max(rss, this.last.heapUsedBytes / this.budget.heapLimitBytes);
  }

  start(): void {
    this.sample();
    this.timer ??= setInterval(() => this.sample(), SAMPLE_MS).unref();
  }

  stop(): void {
    clearInterval(this.timer);
    this.timer = undefined;
  }

  /** One look: starts shedding past either high-water mark, stops under both low-water marks. */
  sample(): void {
    const reading = this.read();
    this.last = reading;
    const { budget } = this;
    const above = reading.rssBytes >= budget.rssHighWaterBytes || reading.heapUsedBytes >= budget.heapHighWaterBytes;
    const below = reading.rssBytes < budget.rssLowWaterBytes && reading.heapUsedBytes < budget.heapLowWaterBytes;
    const next = this.shedding ? !below : above;
    if (next === this.shedding) return;
    this.shedding = next;
    this.onChange(next, reading);
  }
}
