import { Counter, Gauge, Histogram, type Registry } from 'prom-client';
import { METRICS } from './metric-names.js';

/**
 * What a refused record was (state/record-mac.ts), the first segment of its key's name: the `kind` label of
 * signing_sidecar_state_records_rejected_total. `store`: the epoch and its generation; `other`: a name outside these.
 */
export const STATE_RECORD_KINDS = ['idempotency', 'postback', 'token', 'store', 'other'] as const;
export type StateRecordKind = (typeof STATE_RECORD_KINDS)[number];

/**
 * The commands the Redis store sends, as the command label says them (ping: the recovery probe; wait: replicas
 * acknowledging a money write).
 */
export const STATE_STORE_COMMANDS = [
  'get',
  'set_if_absent',
  'compare_and_set',
  'compare_and_delete',
  'write_if',
  'publish',
  'subscribe',
  'ping',
  'wait',
  'stream_group_create',
  'stream_read_group',
  'stream_auto_claim',
  'inbox_append',
  'inbox_take',
  'inbox_settle',
  'inbox_release',
  'inbox_status',
  'inbox_admin',
  'epoch_check',
] as const;
export type StateStoreCommand = (typeof STATE_STORE_COMMANDS)[number];

/** ok: answered; error: Redis or the connection failed; timeout: no answer in time; unavailable: not even sent. */
export const STATE_STORE_OUTCOMES = ['ok', 'error', 'timeout', 'unavailable'] as const;
export type StateStoreOutcome = (typeof STATE_STORE_OUTCOMES)[number];

/** How full the memory store is (memory-store.ts usage()): its approximate bytes and entries, and their limits. */
export interface MemoryStoreUsage {
  readonly bytes: number;
  readonly maxBytes: number;
  readonly entries: number;
  readonly maxEntries: number;
}

// From 50 µs (a loopback Redis) to past the longest command timeout anyone should set.
const COMMAND_BUCKETS = [0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1];

/**
 * The shared state store's metrics, created with the sidecar's registry whatever the store (the dashboard and the
 * alert need the series): up at 0 until a store says otherwise (the memory store sets 1 at once), evictions at
 * zero, the memory store's usage and limits read at each scrape (at zero with Redis). The command histogram has
 * series only with Redis (every command x outcome at zero from its start): the memory store sends no command, and
 * 72 series of 15 buckets at zero would be some 1,200 lines a scrape, and as many series in Prometheus per pod.
 */
export class StateStoreMetrics {
  private readonly up: Gauge;
  private readonly commands: Histogram<'command' | 'outcome'>;
  private readonly evictions: Counter;
  private readonly rejected: Counter<'kind'>;
  private memoryUsage: (() => MemoryStoreUsage) | undefined;
  private readonly wipes: Counter;

  constructor(registry: Registry) {
    this.up = new Gauge({
      name: METRICS.stateStoreUp,
      help: '1 while the shared state store answers (always 1 for the memory store), 0 while Redis is unavailable.',
      registers: [registry],
    });
    this.commands = new Histogram({
      name: METRICS.stateStoreCommandDuration,
      help: 'One Redis state store command, by command and outcome (ok, error, timeout, unavailable: not sent).',
      labelNames: ['command', 'outcome'] as const,
      buckets: COMMAND_BUCKETS,
      registers: [registry],
    });
    this.evictions = new Counter({
      name: METRICS.stateStoreEvictions,
      help: 'Live entries the memory store dropped (oldest settled first) to stay within SIDECAR_STATE_MEMORY_MAX_MB and SIDECAR_STATE_MEMORY_MAX_ENTRIES.',
      registers: [registry],
    });
    this.rejected = new Counter({
      name: METRICS.stateRecordsRejected,
      help: 'Records read from Redis and refused because their MAC is missing or wrong (someone wrote under the key prefix, or the replicas hold different MAC keys), by kind.',
      labelNames: ['kind'] as const,
      registers: [registry],
    });
    for (const kind of STATE_RECORD_KINDS) this.rejected.inc({ kind }, 0);
    const usageGauge = (name: string, help: string, read: (usage: MemoryStoreUsage) => number): void => {
      const gauge: Gauge = new Gauge({
        name,
        help,
        registers: [registry],
        collect: () => {
          const usage = this.memoryUsage?.();
          gauge.set(usage === undefined ? 0 : read(usage));
        },
      });
    };
    usageGauge(
      METRICS.stateStoreMemoryBytes,
      "The memory store's keys and values as the heap holds them, approximately (0 with Redis).",
      (usage) => usage.bytes,
    );
    usageGauge(
      METRICS.stateStoreMemoryLimitBytes,
      'SIDECAR_STATE_MEMORY_MAX_MB in bytes: past it the memory store evicts its oldest settled entries (0 with Redis).',
      (usage) => usage.maxBytes,
    );
    usageGauge(METRICS.stateStoreMemoryEntries, "The memory store's entries (0 with Redis).", (usage) => usage.entries);
    usageGauge(
      METRICS.stateStoreMemoryLimitEntries,
      'SIDECAR_STATE_MEMORY_MAX_ENTRIES: past it the memory store evicts its oldest settled entries (0 with Redis).',
      (usage) => usage.maxEntries,
    );
    this.wipes = new Counter({
      name: METRICS.stateStoreWipes,
      help: 'The Redis dataset found wiped (restarted empty, flushed): idempotency keys, token record, queue lost.',
      registers: [registry],
    });
  }

  /** A Redis store: every command x outcome at zero, so that rate() and the dashboard see the first failure. */
  redisCommandsAtZero(): void {
    for (const command of STATE_STORE_COMMANDS) {
      for (const outcome of STATE_STORE_OUTCOMES) this.commands.zero({ command, outcome });
    }
  }

  available(up: boolean): void {
    this.up.set(up ? 1 : 0);
  }

  command(command: StateStoreCommand, outcome: StateStoreOutcome, seconds: number): void {
    this.commands.observe({ command, outcome }, seconds);
  }

  evicted(): void {
    this.evictions.inc();
  }

  recordRejected(kind: StateRecordKind): void {
    this.rejected.inc({ kind });
  }

  /** Reports the memory store's usage at every scrape from now on. */
  watchMemoryStore(usage: () => MemoryStoreUsage): void {
    this.memoryUsage = usage;
  }

  wiped(): void {
    this.wipes.inc();
  }
}
