// Every refusal the simulator sends goes through this one class, so the status, the public code and the
// detailed reason for the log are decided together at the check that failed, and one function writes them out.

/** The simulator's error body shape (spec 2.5 for tokens; our documented assumption for everything else). */
export interface SimErrorBody {
  readonly code: string;
  readonly message: string;
}

export class SimError extends Error {
  override readonly name = 'SimError';

  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
    /** Extra log fields that explain the refusal; never secrets, tokens, signatures or payload data. */
    readonly details: Readonly<Record<string, string | number | boolean>> = {},
    readonly headers: Readonly<Record<string, string>> = {},
  ) {
    super(message);
  }

  toBody(): SimErrorBody {
    return { code: this.code, message: this.message };
  }
}

/** Token rejections use the spec's fixed code (2.5, 5.1), so clients can recognise "get a new token". */
export function tokenRejected(message: string, details: Record<string, string> = {}): SimError {
  return new SimError(401, 'FAILED', message, details);
}

/** Signature problems: the spec leaves the status open; we chose 401 throughout (documented assumption). */
export function signatureError(code: string, message: string, details: Record<string, string | number> = {}): SimError {
  return new SimError(401, code, message, details);
}

export function badRequest(code: string, message: string): SimError {
  return new SimError(400, code, message);
}
