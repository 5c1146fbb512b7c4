import type { SidecarError } from '../errors.js';

/** An answer as the caller got it, kept so that a retry with the same key gets the same bytes. */
export interface KeptAnswer {
  readonly status: number;
  /** The gateway's headers as they were passed on (hop-by-hop removed); X-Request-Id is each request's own. */
  readonly headers: Readonly<Record<string, string | string[]>>;
  readonly body: Buffer;
  /** The request metric's code label: ok, a sidecar.* code or a gateway error label. */
  readonly code: string;
}

/**
 * How far a claimed request got (docs/idempotency.md, "States"): `claimed`, nothing sent yet; `sending`, it may
 * have reached the gateway. Undefined in a record of a sidecar that kept no stage (it had no lease either): read as
 * before, in progress until its deadline.
 */
export type ClaimStage = 'claimed' | 'sending';

/** The request is being answered by `owner` (a request id) until `deadline` (Unix ms); later it is abandoned. */
export interface InProgressRecord {
  readonly state: 'in_progress';
  readonly fingerprint: string;
  readonly owner: string;
  readonly deadline: number;
  /** Random per claim: the value compareAndSet expects is this claim's and no other's; it names the lease too. */
  readonly claim: string;
  readonly stage?: ClaimStage;
}

export interface DoneRecord {
  readonly state: 'done';
  readonly fingerprint: string;
  readonly answer: KeptAnswer;
}

export type IdempotencyRecord = InProgressRecord | DoneRecord;

/** The JSON of a record: the body as base64, so any bytes survive a string store. */
export function encodeRecord(record: IdempotencyRecord): string {
  if (record.state === 'in_progress') return JSON.stringify({ v: 1, ...record });
  const { answer } = record;
  return JSON.stringify({
    v: 1,
    state: 'done',
    fingerprint: record.fingerprint,
    answer: { status: answer.status, headers: answer.headers, body: answer.body.toString('base64'), code: answer.code },
  });
}

/** Reads a record back; throws on anything this version did not write (nothing is guessed about money). */
export function decodeRecord(text: string): IdempotencyRecord {
  const raw = JSON.parse(text) as Record<string, unknown>;
  if (raw.v !== 1 || typeof raw.fingerprint !== 'string') throw new Error('not an idempotency record');
  if (raw.state === 'in_progress') {
    const { owner, deadline, claim, stage } = raw;
    if (typeof owner !== 'string' || typeof deadline !== 'number' || typeof claim !== 'string')
      throw new Error('malformed in_progress record');
    const record = { state: 'in_progress', fingerprint: raw.fingerprint, owner, deadline, claim } as const;
    if (stage === undefined) return record;
    if (stage !== 'claimed' && stage !== 'sending') throw new Error('malformed in_progress record');
    return { ...record, stage };
  }
  const answer = raw.answer as Record<string, unknown> | undefined;
  if (
    raw.state !== 'done' ||
    typeof answer?.status !== 'number' ||
    typeof answer.body !== 'string' ||
    typeof answer.code !== 'string' ||
    typeof answer.headers !== 'object' ||
    answer.headers === null
  )
    throw new Error('malformed done record');
  return {
    state: 'done',
    fingerprint: raw.fingerprint,
    answer: {
      status: answer.status,
      headers: answer.headers as Record<string, string | string[]>,
      body: Buffer.from(answer.body, 'base64'),
      code: answer.code,
    },
  };
}

/** A sidecar error as errorSettlement (egress/request.ts) answers it: the same status, Content-Type and body bytes. */
export function errorAnswer(error: SidecarError): KeptAnswer {
  return {
    status: error.status,
    headers: { 'content-type': 'application/json' },
    body: Buffer.from(JSON.stringify(error.toBody())),
    code: error.code,
  };
}
