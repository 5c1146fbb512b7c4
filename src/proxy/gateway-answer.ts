import { GATEWAY_ERROR_CODES, type GatewayErrorCode } from '../observability/metric-names.js';
import type { UpstreamResponse } from '../upstream/forwarder.js';
import { jsonObject } from '../upstream/json-body.js';

/**
 * The gateway's own `code` field of an error answer, if its body is a JSON object that has one. Successes are
 * not parsed: nothing reads their code, and they are the hot path.
 */
export function gatewayCode(response: UpstreamResponse): string | undefined {
  if (response.status < 400) return undefined;
  const code = jsonObject(response.body)?.code;
  return typeof code === 'string' ? code : undefined;
}

/** Spec 5.1: HTTP 401 with body code FAILED means the token was refused before anything was done. */
export function isTokenRejection(response: UpstreamResponse, code: string | undefined): boolean {
  return response.status === 401 && code === 'FAILED';
}

const KNOWN = new Set<string>(GATEWAY_ERROR_CODES);

/** Metric label for a gateway error answer, bounded to the contract's set; undefined for a success. */
export function errorLabel(status: number, code: string | undefined): GatewayErrorCode | undefined {
  if (status < 400) return undefined;
  if (status === 403) return 'ip.forbidden';
  return code !== undefined && KNOWN.has(code) ? (code as GatewayErrorCode) : 'other';
}
