import { randomUUID } from 'node:crypto';
const SAFE_ID = /^[A-Za-z0-9._:-]{1,128}$/;
/** The client's X-Request-Id when it is a sane token (it is logged and echoed), else a fresh UUID. */
export function requestId(header) {
    const value = Array.isArray(header) ? header[0] : header;
    return value !== undefined && SAFE_ID.test(value) ? value : randomUUID();
}
