// The id every inbound request is known by: in its log line, its span and its answer's X-Request-Id.
import { randomUUID } from 'node:crypto';

const SAFE_ID = /^[A-Za-z0-9._:-]{1,128}$/;

/**
 * A request id that is safe to log and to echo in a header: only letters, digits and `._:-`. The brand means it
 * went through requestId(); create one only there.
 */
export type RequestId = string & { readonly __brand: 'RequestId' };

/** The client's X-Request-Id when it is a sane token (it is logged and echoed), else a fresh UUID. */
export function requestId(header: string | string[] | undefined): RequestId {
  const value = Array.isArray(header) ? header[0] : header;
  return (value !== undefined && SAFE_ID.test(value) ? value : randomUUID()) as RequestId;
}
