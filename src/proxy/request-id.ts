import { randomUUID } from 'node:crypto';

const SAFE_ID = /^[A-Za-z0-9._:-]{1,128}$/;

/**
 * A request id that is safe to log, echo and write into JSON unescaped: only letters, digits and `._:-`. The
 * brand means it went through requestId(); the request log line relies on that. Create one only there: a cast
 * to RequestId anywhere else would let unchecked text into the log line unescaped.
 */
export type RequestId = string & { readonly __brand: 'RequestId' };

/** The client's X-Request-Id when it is a sane token (it is logged and echoed), else a fresh UUID. */
export function requestId(header: string | string[] | undefined): RequestId {
  const value = Array.isArray(header) ? header[0] : header;
  return (value !== undefined && SAFE_ID.test(value) ? value : randomUUID()) as RequestId;
}
