import type { Logger } from '../observability/log.js';
import type { StateStoreMetrics } from '../observability/state-store-metrics.js';
import type { RecordKind } from './record-mac.js';

/**
 * A record read back from Redis that no sidecar wrote: refused by its MAC (record-mac.ts: `unsigned`, `mismatch`) or
 * by its reader's checks of its value (the token record's, token/fleet-record.ts). It is not used.
 */
export interface RefusedRecord {
  readonly kind: RecordKind;
  readonly reason: string;
  /** The record's key without the prefix (`idempotency:<sha256>`, `token:record`): never its content. */
  readonly key: string;
}

export type RefusedRecordReport = (refused: RefusedRecord) => void;

/**
 * The one route of every refused record, whoever refused it: counted in
 * signing_sidecar_state_records_rejected_total{kind} and logged (`state.record_rejected`), never its content.
 */
export function refusedRecordReport(
  metrics: Pick<StateStoreMetrics, 'recordRejected'> | undefined,
  log: Logger | undefined,
): RefusedRecordReport {
  return ({ kind, reason, key }) => {
    metrics?.recordRejected(kind);
    log?.error(
      { event: 'state.record_rejected', kind, reason, key },
      'record in Redis refused and not used: no sidecar wrote it (someone wrote under the key prefix), or the replicas hold different MAC keys',
    );
  };
}
