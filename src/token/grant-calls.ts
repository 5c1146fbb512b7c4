import type { Logger } from '../observability/log.js';
import type { SidecarMetrics, TokenGrant } from '../observability/metrics.js';
import type { TraceContext, Tracing } from '../observability/tracing.js';
import type { GrantResult } from './token-set.js';
import { isoTimestamp } from '../time/utc-time.js';

/** Where a grant's span goes: the tracing, and the span it is made under (undefined: a trace of its own). */
export interface GrantTrace {
  readonly tracing: Tracing;
  readonly parent: TraceContext | undefined;
}

/**
 * One call to the token endpoint, counted, logged and traced (status, gateway code and expiries; never a token,
 * the password or the gateway's message: the code is masked and the message dropped by token-client.ts).
 */
export async function callGrant(
  grant: TokenGrant,
  send: () => Promise<GrantResult>,
  metrics: Pick<SidecarMetrics, 'tokenCall'>,
  log: Logger,
  trace?: GrantTrace,
): Promise<GrantResult> {
  const span = trace?.tracing.startSpan('token grant', 'client', trace.parent, { 'sidecar.token.grant': grant });
  let result: GrantResult;
  try {
    result = await send();
  } catch (error) {
    span?.fail('error');
    span?.end();
    throw error;
  }
  const outcome = result.kind === 'granted' ? 'success' : result.kind === 'rejected' ? 'rejected' : 'error';
  metrics.tokenCall(grant, outcome);
  if (span !== undefined) {
    span.setAttributes({
      'sidecar.token.outcome': outcome,
      'http.response.status_code': result.kind === 'rejected' ? result.status : undefined,
      'sidecar.gateway_code': result.kind === 'rejected' ? result.code : undefined,
      'sidecar.sent': result.kind === 'failed' ? result.sent : true,
    });
    if (result.kind !== 'granted') span.fail(result.kind === 'rejected' ? (result.code ?? 'rejected') : 'failed');
    span.end();
  }
  if (result.kind === 'granted') {
    log.info(
      {
        event: 'token.granted',
        grant,
        accessExpiresAt: isoTimestamp(result.tokens.accessExpiresAtMs),
        refreshExpiresAt: isoTimestamp(result.tokens.refreshExpiresAtMs),
      },
      'token endpoint granted new tokens',
    );
  } else if (result.kind === 'rejected') {
    log.warn(
      { event: 'token.rejected_grant', grant, status: result.status, code: result.code },
      'token endpoint refused the grant',
    );
  } else {
    log.warn(
      { event: 'token.grant_failed', grant, sent: result.sent, reason: result.reason },
      'token endpoint call failed',
    );
  }
  return result;
}

/**
 * A grant that has not answered within `ms` counts as sent without an answer (its refresh token spent). The call
 * itself goes on and is still counted and logged when it ends; its result is no longer used.
 */
export async function grantWithin(grant: Promise<GrantResult>, ms: number): Promise<GrantResult> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<GrantResult>((resolve) => {
    timer = setTimeout(() => resolve({ kind: 'failed', sent: true, reason: `no answer within ${ms} ms` }), ms);
  });
  try {
    return await Promise.race([grant, timeout]);
  } finally {
    clearTimeout(timer);
  }
}
