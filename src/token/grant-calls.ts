import type { Logger } from '../observability/log.js';
import type { SidecarMetrics, TokenGrant } from '../observability/metrics.js';
import type { GrantResult } from './token-set.js';

/** One call to the token endpoint, counted and logged (status, gateway code and expiries; never a token). */
export async function callGrant(
  grant: TokenGrant,
  send: () => Promise<GrantResult>,
  metrics: Pick<SidecarMetrics, 'tokenCall'>,
  log: Logger,
): Promise<GrantResult> {
  const result = await send();
  const outcome = result.kind === 'granted' ? 'success' : result.kind === 'rejected' ? 'rejected' : 'error';
  metrics.tokenCall(grant, outcome);
  if (result.kind === 'granted') {
    log.info(
      {
        event: 'token.granted',
        grant,
        accessExpiresAt: new Date(result.tokens.accessExpiresAtMs).toISOString(),
        refreshExpiresAt: new Date(result.tokens.refreshExpiresAtMs).toISOString(),
      },
      'token endpoint granted new tokens',
    );
  } else if (result.kind === 'rejected') {
    log.warn(
      {
        event: 'token.rejected_grant',
        grant,
        status: result.status,
        code: result.code,
        gatewayMessage: result.message,
      },
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
