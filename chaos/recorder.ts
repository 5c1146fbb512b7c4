// Collects the history in memory as it happens, each event stamped with ms since the run started.
import type { HistoryEvent } from './history.js';

type Untimed<E> = E extends HistoryEvent ? Omit<E, 't'> : never;

export class Recorder {
  readonly events: HistoryEvent[] = [];
  private readonly startedAt = performance.now();

  /** ms since the run started. */
  now(): number {
    return Math.round(performance.now() - this.startedAt);
  }

  record(event: Untimed<HistoryEvent>): void {
    this.events.push({ t: this.now(), ...event });
  }
}
