// `check` for the postback receiver: the settings that config validation already proved (URL form, keys) are
// shown with what they resolve to, and the one thing config cannot know is probed: can the application be
// reached. No postback is sent: the application would take it for a real one.
import type { PostbackConfig } from '../config/postback-settings.js';
import { publicKeyFingerprint } from '../signing/keys.js';
import { signedPostbackUrl } from '../postback/public-url.js';
import type { CheckReport } from './check-report.js';
import { probeConnection } from './probe-connection.js';

function keysLine(postback: PostbackConfig): string {
  if (postback.publicKeys.length === 0) return 'none (unsigned postbacks only; signed ones are refused)';
  const keys = postback.publicKeys.map(
    (key) => `RSA ${key.asymmetricKeyDetails?.modulusLength ?? 0} bits, fingerprint ${publicKeyFingerprint(key)}`,
  );
  return `${keys.length} key(s): ${keys.join('; ')}`;
}

export async function checkPostbacks(postback: PostbackConfig | undefined, report: CheckReport): Promise<void> {
  if (postback === undefined) {
    report.line('-', 'postback receiver', 'off (SIDECAR_POSTBACK_FORWARD_URL is not set)');
    return;
  }
  const { listen, publicUrl } = postback;
  report.line(
    '✔',
    'postback public URL',
    `signed as ${signedPostbackUrl(publicUrl)}; serves POST ${publicUrl.path} on ${listen.host}:${listen.port}`,
  );
  if (publicUrl.protocol === 'http:') {
    report.line(
      '!',
      'postback public URL',
      'http://: the gateway would post in clear text; use https:// (TLS at the Ingress)',
    );
  }
  report.line('✔', 'postback keys', keysLine(postback));
  const sources = postback.allowCidrs?.ranges.join(', ') ?? 'any (the signature is the only check)';
  const unsigned = postback.acceptUnsigned ? 'accepted from these sources' : 'refused';
  report.line('-', 'postback sources', `${sources}; unsigned postbacks ${unsigned}`);
  report.line('-', 'postback delivery', deliveryLine(postback));
  if (postback.forwardSecret === undefined) {
    report.line('!', 'postback forward signing', 'off: the application cannot tell forged postbacks from real ones');
  } else {
    const bytes = postback.forwardSecret.symmetricKeySize ?? 0;
    report.line('✔', 'postback forward signing', `Standard Webhooks, HMAC-SHA256 with a ${bytes}-byte secret`);
  }
  const application = new URL(postback.forwardUrl);
  const base = {
    origin: application.origin,
    pathPrefix: '',
    protocol: application.protocol as 'http:' | 'https:',
    hostname: application.hostname,
    isLoopback: false,
  };
  // The application client trusts the system roots only, so the probe does too.
  const probe = await probeConnection(base, undefined, Math.min(postback.forwardTimeoutMs, 5_000));
  const detail = probe.mark === '✔' && base.protocol === 'http:' ? 'TCP ok' : probe.detail;
  report.line(probe.mark, 'postback forward URL reachable', `${application.origin}${application.pathname}: ${detail}`);
}

/** `direct`, or `queued` with what shapes it: the order field, the concurrency and how long the attempts last. */
function deliveryLine(postback: PostbackConfig): string {
  if (postback.delivery === 'direct') return 'direct (the gateway waits for the application; 503 when it fails)';
  const hours = postback.retryScheduleMs.reduce((sum, ms) => sum + ms, 0) / 3_600_000;
  return (
    `queued in Redis (${postback.retryScheduleMs.length} attempts over ${hours.toFixed(1)} h, ` +
    `${postback.deliveryConcurrency} at once per replica, in order by payload field "${postback.orderField}")`
  );
}
