// The history of a chaos run: what every caller asked and was told, what the gateway recorded, what the application
// received, and when each fault was on. One JSON object a line (history.jsonl), `t` in ms since the run started.
// The checker reads nothing else, so a history written by hand (a doctored one, in its tests) is checked the same way.
import { readFileSync } from 'node:fs';

/** Jepsen's meanings: `ok` done, `fail` certainly not done, `info` unknown (may or may not be done). */
export type Outcome = 'ok' | 'fail' | 'info';
export type PaymentKind = 'deposit' | 'withdrawal';
export type LedgerStatus = 'PENDING' | 'SUCCESS' | 'FAILED';

/** The run's parameters, the first line. */
export interface RunEvent {
  readonly t: number;
  readonly type: 'run';
  readonly seed: number;
  readonly duration_s: number;
  readonly replicas: number;
  readonly callers: number;
  /** Where the parts ran: all on loopback, or each in a network namespace (links the nemesis can cut). */
  readonly network?: 'namespaces' | 'loopback';
}

/** One attempt of one payment (`key` is the payment's Idempotency-Key, the same on every attempt). */
export interface InvokeEvent {
  readonly t: number;
  readonly type: 'invoke';
  readonly process: number;
  readonly op: PaymentKind;
  readonly invoice_no: string;
  readonly key: string;
  readonly replica: number;
  /** The payments made after every fault healed, which must all get 200 (liveness). */
  readonly final_round?: boolean;
}

export interface AnswerEvent {
  readonly t: number;
  readonly type: Outcome;
  readonly process: number;
  readonly invoice_no: string;
  readonly key: string;
  readonly replica: number;
  /** HTTP status, 0 when no answer came (connection cut, caller's timeout). */
  readonly status: number;
  readonly code?: string;
  readonly transaction_id?: string;
  readonly latency_ms: number;
  readonly final_round?: boolean;
}

/** A transaction the gateway holds, read from the simulator's control API. */
export interface LedgerEvent {
  readonly t: number;
  readonly type: 'ledger';
  readonly transaction_id: string;
  readonly invoice_no: string;
  readonly status: LedgerStatus;
}

/** The workload asked the gateway to complete a transaction (Pay or Decline): its postback goes out now. */
export interface CompleteEvent {
  readonly t: number;
  readonly type: 'complete';
  readonly transaction_id: string;
  readonly status: 'SUCCESS' | 'FAILED';
}

/** A postback the application received and accepted (2xx), or refused for a bad signature (`verified` false). */
export interface PostbackEvent {
  readonly t: number;
  readonly type: 'postback';
  readonly transaction_id: string;
  readonly status: string;
  readonly postback_id: string;
  readonly attempt: number;
  readonly verified: boolean;
}

export interface FaultEvent {
  readonly t: number;
  readonly type: 'fault';
  readonly kind: FaultKind;
  readonly start: number;
  readonly end: number;
  /** What exactly was hit (a replica's index, a count, a clock offset), for a reader. */
  readonly detail?: string;
  /** `redis-restart-empty`: whether the primary the Sentinels name afterwards lost a marker written before. */
  readonly wiped?: boolean;
  /** `redis-restart-empty`: when a replica's `signing_sidecar_state_store_wipes_total` first rose (null: not in 15 s). */
  readonly noticed_at?: number | null;
  /**
   * `redis-restart-snapshot`: whether the primary the Sentinels name afterwards lost a marker written after the
   * snapshot (the dataset went back to the snapshot's; false: a failover kept the newer data after all).
   */
  readonly rolled_back?: boolean;
}

/** A replica process that exited without the nemesis stopping it: killed by memory, or crashed. */
export interface CrashEvent {
  readonly t: number;
  readonly type: 'crash';
  readonly replica: number;
  readonly code: number | null;
  readonly signal: string | null;
}

/** At the end: the wipes each replica slot counted (its metric, summed over the processes it ran). */
export interface WipesNoticedEvent {
  readonly t: number;
  readonly type: 'wipes_noticed';
  readonly per_replica: readonly number[];
}

/** Password logins and refreshes the gateway granted over the whole run. */
export interface LoginsEvent {
  readonly t: number;
  readonly type: 'logins';
  readonly password: number;
  readonly refresh: number;
}

/** After the last fault healed (`healed_at`): when each liveness condition was met (null: not within the bound). */
export interface LivenessEvent {
  readonly t: number;
  readonly type: 'liveness';
  readonly healed_at: number;
  readonly replicas_ready_at: number | null;
  readonly final_round_done_at: number | null;
  readonly inbox_drained_at: number | null;
}

export type HistoryEvent =
  | RunEvent
  | InvokeEvent
  | AnswerEvent
  | LedgerEvent
  | CompleteEvent
  | PostbackEvent
  | FaultEvent
  | LoginsEvent
  | LivenessEvent
  | WipesNoticedEvent
  | CrashEvent;

export const FAULT_KINDS = [
  'replica-kill',
  'rolling-restart',
  'redis-primary-kill',
  'redis-pause',
  'redis-restart-empty',
  'redis-restart-snapshot',
  'app-down',
  'app-500',
  'gateway-commit-reset',
  'gateway-commit-slow',
  'gateway-5xx',
  'gateway-reset',
  'token-revoke',
  'clock-step',
  'password-rotation',
  'hostile-neighbour',
  // Cut links (a `namespaces` run only).
  'partition-primary',
  'partition-sidecar',
  'partition-sentinels',
  'one-way-loss',
  'flapping-link',
] as const;
export type FaultKind = (typeof FAULT_KINDS)[number];

export const toJsonl = (events: readonly HistoryEvent[]): string =>
  events.map((event) => JSON.stringify(event)).join('\n') + '\n';

export function readHistory(file: string): HistoryEvent[] {
  return readFileSync(file, 'utf8')
    .split('\n')
    .filter((line) => line.trim() !== '')
    .map((line, index) => {
      try {
        return JSON.parse(line) as HistoryEvent;
      } catch {
        throw new Error(`${file}:${index + 1}: not a JSON line`);
      }
    });
}
