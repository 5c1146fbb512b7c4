import { sidecarErrors } from '../errors.js';
import { signedUrl, upstreamPath } from '../signing/canonical-url.js';
import { newNonce } from '../signing/nonce.js';
import { signingString, unixTimestamp } from '../signing/signing-string.js';
import { backoffDelayMs, sleep } from '../token/backoff.js';
import { errorLabel, gatewayCode, isTokenRejection } from './gateway-answer.js';
const DATE_RESOLUTION_MS = 1000;
/**
 * Signs and sends one client request, applying DESIGN.md's retry rules and nothing more:
 * - connection failures before any byte left: re-sign and retry with capped backoff within a deadline;
 * - 401 FAILED: fresh token, re-sign with a new timestamp and nonce, send once more;
 * - anything after bytes were sent without an answer: never resent (sidecar.upstream.outcome_unknown).
 * Every attempt gets its own timestamp and nonce (spec 5.2: "including retries").
 */
export async function sendSigned(deps, request) {
    const now = deps.now ?? Date.now;
    const giveUpAt = performance.now() + deps.connectRetryDeadlineMs;
    let token = await deps.tokens.token();
    let tokenRetried = false;
    let connectFailures = 0;
    for (let attempts = 1;; attempts++) {
        const { outcome, signed } = await attempt(deps, request, token.accessToken.reveal(), now());
        if (outcome.kind === 'not_sent') {
            const delay = backoffDelayMs(connectFailures++, 100, 2_000);
            if (performance.now() + delay >= giveUpAt)
                throw sidecarErrors.upstreamUnreachable(outcome.error);
            deps.metrics.retry('connect_failed');
            await sleep(delay);
            continue;
        }
        if (outcome.kind === 'sent_no_answer')
            throw sidecarErrors.outcomeUnknown(outcome.timedOut ? 504 : 502, outcome.error);
        const { response } = outcome;
        const code = gatewayCode(response);
        observeAnswer(deps.metrics, response, code, now());
        if (isTokenRejection(response, code) && !tokenRetried) {
            tokenRetried = true;
            deps.metrics.retry('token_rejected');
            token = await deps.tokens.tokenAfterRejection(token.generation);
            continue;
        }
        return { response, gatewayCode: code, attempts, signed };
    }
}
async function attempt(deps, request, bearer, nowMs) {
    const fullUrl = signedUrl(deps.base, request.target);
    const timestamp = unixTimestamp(nowMs);
    const nonce = newNonce();
    const started = performance.now();
    const signature = await deps.signer.sign(signingString({ method: 'POST', fullUrl, timestamp, nonce, data: request.envelope.data }));
    deps.metrics.signed((performance.now() - started) / 1000);
    const sentAt = performance.now();
    const outcome = await deps.forwarder.send({
        path: upstreamPath(deps.base, request.target),
        headers: {
            ...request.headers,
            'content-type': 'application/json',
            authorization: `Bearer ${bearer}`,
            'x-timestamp': timestamp,
            'x-nonce': nonce,
            'x-signature': signature,
        },
        body: request.envelope.json,
    });
    if (outcome.kind !== 'not_sent')
        deps.metrics.gatewayRoundTrip(request.route, (performance.now() - sentAt) / 1000);
    return { outcome, signed: { fullUrl, timestamp, nonce } };
}
function observeAnswer(metrics, response, code, nowMs) {
    const label = errorLabel(response.status, code);
    if (label)
        metrics.gatewayError(label);
    const date = response.headers.date;
    const gatewayMs = typeof date === 'string' ? Date.parse(date) : Number.NaN;
    // The Date header is truncated to the second, so the gateway's clock read somewhere in [date, date + 1 s):
    // the midpoint makes the estimate unbiased (error +/- 0.5 s, enough to spot the skews of seconds that break
    // the timestamp window). Without it the gauge would show about -0.5 s against a perfectly synced gateway.
    if (!Number.isNaN(gatewayMs))
        metrics.clockSkew((gatewayMs + DATE_RESOLUTION_MS / 2 - nowMs) / 1000);
}
