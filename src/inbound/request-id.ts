// The id every inbound request is known by: in its log line, its span and its answer's X-Request-Id.
import { randomBytes } from 'node:crypto';

const SAFE_ID = /^[A-Za-z0-9._:-]{1,128}$/;

/**
 * The first part of every id this process makes: random, so that ids stay apart across replicas and restarts.
 * The second part counts. A counter, not a UUID per request: a UUID's text is built from some 20 pieces, 0.5 KB of
 * heap per request, where the counter's is two strings.
 */
const PROCESS_PART = `${randomBytes(8).toString('hex')}-`;
let issued = 0;

/**
 * A request id that is safe to log and to echo in a header: only letters, digits and `._:-`. The brand means it
 * went through requestId(); create one only there.
 */
export type RequestId = string & { readonly __brand: 'RequestId' };

/** The client's X-Request-Id when it is a sane token (it is logged and echoed), else a fresh id of this process. */
export function requestId(header: string | string[] | undefined): RequestId {
  const value = Array.isArray(header) ? header[0] : header;
  return (
    value !== undefined && SAFE_ID.test(value) ? value : `${PROCESS_PART}${(issued++).toString(36)}`
  ) as RequestId;
}
