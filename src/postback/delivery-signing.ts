// Signs each delivery to the application by the Standard Webhooks scheme (standardwebhooks.com): `webhook-id`,
// `webhook-timestamp` (Unix seconds of this attempt) and `webhook-signature: v1,<base64 HMAC-SHA256 of
// "<id>.<timestamp>.<body>">`, keyed with the bytes after `whsec_` of SIDECAR_POSTBACK_FORWARD_SECRET_FILE. The
// application verifies with any Standard Webhooks library, so a pod of the namespace that can reach the application
// cannot forge a postback (docs/postbacks.md#signed-for-the-application). Core signing, a few lines of node:crypto.
import { createHmac, type KeyObject } from 'node:crypto';
import { FORWARD_SECRET_GRACE_MS } from '../config/postback-settings.js';

export interface DeliverySigner {
  /** The three headers of one attempt: its own timestamp, the postback's stable id. */
  headers(id: string, body: Buffer | string): Record<string, string>;
  /** Installs a rotated secret: the next attempt is signed with it (and the previous one, for the grace period). */
  replaceSecret(secret: KeyObject): void;
}

function signature(secret: KeyObject, id: string, timestamp: string, body: Buffer | string): string {
  return `v1,${createHmac('sha256', secret).update(`${id}.${timestamp}.`).update(body).digest('base64')}`;
}

export function createDeliverySigner(secret: KeyObject, nowMs: () => number = Date.now): DeliverySigner {
  let current = secret;
  let previous: { readonly secret: KeyObject; readonly untilMs: number } | undefined;
  return {
    headers(id, body) {
      const now = nowMs();
      const timestamp = String(Math.floor(now / 1000));
      const secrets = previous !== undefined && now < previous.untilMs ? [current, previous.secret] : [current];
      return {
        'webhook-id': id,
        'webhook-timestamp': timestamp,
        // Space-separated, the current secret's first: the spec's list for a zero-downtime rotation.
        'webhook-signature': secrets.map((key) => signature(key, id, timestamp, body)).join(' '),
      };
    },
    replaceSecret(next) {
      if (next.equals(current)) return;
      previous = { secret: current, untilMs: nowMs() + FORWARD_SECRET_GRACE_MS };
      current = next;
    },
  };
}
