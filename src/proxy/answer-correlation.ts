import { upstreamErrors, type UpstreamError, type UpstreamResponse } from '../upstream/forwarder.js';
import { jsonObject } from '../upstream/json-body.js';

export type AnswerCheck = (response: UpstreamResponse) => UpstreamError | undefined;

/**
 * On a keep-alive HTTP/1.1 connection, a gateway that writes a stray second copy of an answer can have that copy
 * read as the next request's answer; nothing in HTTP/1.1 tells them apart. Where the client's payload and the
 * gateway's JSON answer both carry a correlation field (invoice_no by default), their values must be equal, or
 * the answer is not this request's. Answers without the field, or payloads without it, cannot be checked.
 * Undefined when the payload carries none of the fields: nothing to compare.
 */
export function answerCorrelation(
  fields: readonly string[],
  payload: Readonly<Record<string, unknown>>,
): AnswerCheck | undefined {
  const expected = fields
    .filter((field) => Object.hasOwn(payload, field))
    .map((field) => [field, comparable(payload[field])] as const);
  if (expected.length === 0) return undefined;
  return (response) => {
    const answer = jsonObject(response.body);
    if (answer === undefined) return undefined;
    const differing = expected.find(
      ([field, value]) => Object.hasOwn(answer, field) && comparable(answer[field]) !== value,
    );
    return differing === undefined ? undefined : upstreamErrors.answerMismatch(differing[0]);
  };
}

/** A gateway may echo `"123"` for `123`: values are compared as text, objects by their JSON. */
function comparable(value: unknown): string {
  return typeof value === 'string' ? value : (JSON.stringify(value) ?? '');
}
