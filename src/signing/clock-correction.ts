/** The gateway's Date header has whole seconds: its clock read somewhere in [Date, Date + 1 s). */
const DATE_RESOLUTION_MS = 1000;
/** Answers the correction is the median of: one odd Date (a proxy's, a slow answer) does not move it. */
const WINDOW = 15;
/** Offsets this small are within the Date header's resolution: no correction is better than a noisy one. */
const DEAD_BAND_MS = 1000;

export interface ClockCorrectionOptions {
  /** SIDECAR_CLOCK_SKEW_CORRECTION */
  readonly skewCorrection: boolean;
  /** SIDECAR_CLOCK_SKEW_MAX_CORRECTION_SECONDS */
  readonly maxCorrectionSeconds: number;
}

export interface ClockReporter {
  clockSkew(seconds: number): void;
  clockCorrection(seconds: number): void;
  clockCorrectionRefused(): void;
}

/**
 * Gateway clock minus local clock in ms, from an answer's Date header read at `localMs`; undefined without one.
 * The midpoint of the Date's second makes the estimate unbiased (error +/- 0.5 s, enough for the window's seconds).
 */
export function gatewayOffsetMs(date: string | string[] | undefined, localMs: number): number | undefined {
  const gatewayMs = typeof date === 'string' ? Date.parse(date) : Number.NaN;
  return Number.isNaN(gatewayMs) ? undefined : gatewayMs + DATE_RESOLUTION_MS / 2 - localMs;
}

/**
 * The gateway refuses X-Timestamp more than 60 s behind or 5 s ahead of its own clock (spec 8). Every answer's
 * Date header measures the offset (the skew gauge); with correction on, X-Timestamp is the local time plus the
 * median offset of recent answers, never more than the configured maximum: a node whose clock runs off keeps
 * working while the skew alert asks for NTP to be fixed. A larger offset is refused (counted) and the correction
 * in use stays.
 */
export class ClockCorrection {
  private samples: number[] = [];
  private appliedMs = 0;

  constructor(
    private readonly options: ClockCorrectionOptions,
    private readonly report: ClockReporter,
  ) {
    report.clockCorrection(0);
  }

  /** An answer's Date header, read at `localMs`. */
  observe(date: string | string[] | undefined, localMs: number): void {
    const offset = gatewayOffsetMs(date, localMs);
    if (offset === undefined) return;
    this.report.clockSkew(offset / 1000);
    if (!this.options.skewCorrection) return;
    this.samples.push(offset);
    if (this.samples.length > WINDOW) this.samples.shift();
    this.apply(median(this.samples));
  }

  /** The gateway refused a timestamp: the recent answers no longer describe its clock; this one alone does. */
  remeasure(date: string | string[] | undefined, localMs: number): void {
    const offset = gatewayOffsetMs(date, localMs);
    if (offset === undefined || !this.options.skewCorrection) return;
    this.samples = [offset];
    this.apply(offset);
  }

  /** The time to sign with, in ms. */
  timestampMs(localMs: number): number {
    return localMs + this.appliedMs;
  }

  private apply(offsetMs: number): void {
    if (Math.abs(offsetMs) > this.options.maxCorrectionSeconds * 1000) {
      this.report.clockCorrectionRefused();
      return;
    }
    const next = Math.abs(offsetMs) < DEAD_BAND_MS ? 0 : Math.round(offsetMs);
    if (next === this.appliedMs) return;
    this.appliedMs = next;
    this.report.clockCorrection(next / 1000);
  }
}

function median(values: readonly number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  const middle = Math.floor(sorted.length / 2);
  return sorted.length % 2 === 1
    ? (sorted[middle] as number)
    : ((sorted[middle - 1] as number) + (sorted[middle] as number)) / 2;
}
