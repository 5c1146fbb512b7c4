// Fault injection for the next N requests: the failures a vendor's client meets in production, on demand.
// A fault answers *instead of* processing (nothing is created), except `delay`, which slows a normal answer, and
// the two `commit-*` kinds, which process the request (the transaction is recorded) and then lose or stall the
// answer: the case where a client cannot tell whether its payment was made.

export type FaultKind = '5xx' | 'delay' | 'reset' | '401' | 'commit-reset' | 'commit-slow';
/** Which requests a fault applies to: the signed endpoints (default), the token endpoint, or both. */
export type FaultTarget = 'signed' | 'token' | 'any';

export interface FaultSpec {
  readonly kind: FaultKind;
  /** How many matching requests it affects. Default 1. */
  readonly count?: number;
  /** For `delay` and `commit-slow`: how long to wait before answering. Default 2000 ms. */
  readonly delayMs?: number;
  /** For `5xx`: the status to answer. Default 503. */
  readonly status?: number;
  readonly target?: FaultTarget;
}

export interface ArmedFault {
  readonly kind: FaultKind;
  readonly remaining: number;
  readonly delayMs: number;
  readonly status: number;
  readonly target: FaultTarget;
}

export interface FaultInjector {
  add(spec: FaultSpec): ArmedFault;
  /** Consumes one use of the first armed fault matching this request kind, if any. */
  take(kind: 'signed' | 'token'): ArmedFault | undefined;
  list(): ArmedFault[];
  clear(): void;
}

export const FAULT_KINDS: readonly FaultKind[] = ['5xx', 'delay', 'reset', '401', 'commit-reset', 'commit-slow'];
/** The kinds that let the request be processed (recorded) before they act on the answer. */
export const AFTER_COMMIT_KINDS: readonly FaultKind[] = ['commit-reset', 'commit-slow'];
export const FAULT_TARGETS: readonly FaultTarget[] = ['signed', 'token', 'any'];
const MAX_DELAY_MS = 10 * 60 * 1000;

/** Throws a RangeError naming the bad field; the control API turns it into a 400. */
export function validateFaultSpec(spec: FaultSpec): ArmedFault {
  if (!FAULT_KINDS.includes(spec.kind)) throw new RangeError(`kind must be one of ${FAULT_KINDS.join(', ')}`);
  const count = spec.count ?? 1;
  if (!Number.isInteger(count) || count < 1 || count > 10_000) throw new RangeError('count must be 1..10000');
  const delayMs = spec.delayMs ?? 2000;
  if (!Number.isInteger(delayMs) || delayMs < 0 || delayMs > MAX_DELAY_MS) {
    throw new RangeError(`delay_ms must be 0..${MAX_DELAY_MS}`);
  }
  const status = spec.status ?? 503;
  if (!Number.isInteger(status) || status < 500 || status > 599) throw new RangeError('status must be 500..599');
  const target = spec.target ?? 'signed';
  if (!FAULT_TARGETS.includes(target)) throw new RangeError(`target must be one of ${FAULT_TARGETS.join(', ')}`);
  return { kind: spec.kind, remaining: count, delayMs, status, target };
}

export function createFaultInjector(): FaultInjector {
  let armed: ArmedFault[] = [];
  return {
    add(spec) {
      const fault = validateFaultSpec(spec);
      armed.push(fault);
      return fault;
    },
    take(kind) {
      const index = armed.findIndex((f) => f.target === 'any' || f.target === kind);
      const fault = armed[index];
      if (fault === undefined) return undefined;
      const remaining = fault.remaining - 1;
      armed = remaining === 0 ? armed.filter((_, i) => i !== index) : armed.with(index, { ...fault, remaining });
      return fault;
    },
    list: () => [...armed],
    clear() {
      armed = [];
    },
  };
}
