// Signs each delivery to the application by the Standard Webhooks scheme (standardwebhooks.com): `webhook-id`,
// `webhook-timestamp` (Unix seconds of this attempt) and `webhook-signature: v1,<base64 HMAC-SHA256 of
// "<id>.<timestamp>.<body>">`, keyed with the bytes after `whsec_` of SIDECAR_POSTBACK_FORWARD_SECRET_FILE. The
// application verifies with any Standard Webhooks library, so a pod of the namespace that can reach the application
// cannot forge a postback (docs/postbacks.md#signed-for-the-application). Core signing, a few lines of node:crypto.
import { createHmac, type KeyObject } from 'node:crypto';

/**
 * After a rotation of the forward secret the previous one signs too, beside the new one, for this long (the spec's
 * "old key for a set period of time"): an application that still holds the old secret (it re-reads its copy of the
 * Secret later, or at its next restart) keeps verifying meanwhile; past it, only the new secret signs. Signing with
 * an old, even compromised, secret costs nothing: the application accepts only signatures of the secret it holds.
 */
export const FORWARD_SECRET_GRACE_MS = 60 * 60 * 1000;

function signature(secret: KeyObject, id: string, timestamp: string, body: Buffer | string): string {
  return `v1,${createHmac('sha256', secret).update(`${id}.${timestamp}.`).update(body).digest('base64')}`;
}

/** The forward secret in use, and the previous one during its grace period after a rotation. */
export class DeliverySigner {
  private previous: { readonly secret: KeyObject; readonly untilMs: number } | undefined;

  constructor(
    private current: KeyObject,
    private readonly nowMs: () => number = Date.now,
  ) {}

  /** The three headers of one attempt: its own timestamp, the postback's stable id. */
  headers(id: string, body: Buffer | string): Record<string, string> {
    const now = this.nowMs();
    const timestamp = String(Math.floor(now / 1000));
    const { current, previous } = this;
    const secrets = previous !== undefined && now < previous.untilMs ? [current, previous.secret] : [current];
    return {
      'webhook-id': id,
      'webhook-timestamp': timestamp,
      // Space-separated, the current secret's first: the spec's list for a zero-downtime rotation.
      'webhook-signature': secrets.map((key) => signature(key, id, timestamp, body)).join(' '),
    };
  }

  /** Installs a rotated secret: the next attempt is signed with it (and the previous one, for the grace period). */
  replaceSecret(next: KeyObject): void {
    if (next.equals(this.current)) return;
    this.previous = { secret: this.current, untilMs: this.nowMs() + FORWARD_SECRET_GRACE_MS };
    this.current = next;
  }
}
