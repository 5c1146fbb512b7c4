// The postback as the application receives it, for the contract's `webhooks` (OpenAPI 3.1): the request the
// application client makes (postback/application-client.ts, signed by postback/delivery-signing.ts) and what each
// answer makes the sidecar do (postback/sink.ts for `direct`, postback/delivery-worker.ts for `queued`).
// test/contract/postback-webhook.test.ts checks it against real deliveries.
import { createHash } from 'node:crypto';
import { SETTINGS } from '../config/schema.js';
import { RETRY_JITTER } from '../postback/delivery-worker.js';
import { postbackIdOf } from '../postback/inbox.js';

type Schema = Record<string, unknown>;

const setting = SETTINGS.postback;

/** A postback as the simulator sends one (the spec shows no fields): the payload's example. */
const PAYLOAD_EXAMPLE = {
  transaction_id: 'txn_5f0c2a9e81d4b7c36a1e9f02',
  type: 'deposit',
  status: 'SUCCESS',
  amount: '100.50',
  currency: 'USD',
  invoice_no: 'INV-1001',
  user_id: 'u-42',
  completed_at: '2025-01-31T12:00:00.000Z',
};

const POSTBACK_ID_PATTERN = '^pb_[0-9a-f]{32}$';
const POSTBACK_ID_EXAMPLE = postbackIdOf(createHash('sha256').update(JSON.stringify(PAYLOAD_EXAMPLE)).digest('hex'));
/** One HMAC-SHA256 in standard base64 (32 bytes: 43 characters and one `=`). */
const SIGNATURE = 'v1,[A-Za-z0-9+/]{43}=';

export const POSTBACK_PAYLOAD_SCHEMA: Schema = {
  type: 'object',
  description:
    "The gateway's postback payload: the JSON object in the postback's `data`, as its exact decoded bytes (verify the signature over these bytes, before parsing them). The spec shows none of its fields (section 6), only that it reports a transaction's final status, `SUCCESS` or `FAILED`; the example is the simulator's.",
  additionalProperties: true,
  examples: [PAYLOAD_EXAMPLE],
};

function header(name: string, required: boolean, description: string, schema: Schema): Schema {
  return { name, in: 'header', required, description, schema: { type: 'string', ...schema } };
}

/**
 * `signed`: deliveries carry the Standard Webhooks headers (SIDECAR_POSTBACK_FORWARD_SECRET_FILE set; required in
 * production), so the document marks them required.
 */
export function postbackWebhook(signed: boolean): Schema {
  const timeout = `\`${setting.forwardTimeoutMs.env}\` (${setting.forwardTimeoutMs.default / 1000} s by default)`;
  const jitter = `±${RETRY_JITTER * 100} %`;
  return {
    post: {
      operationId: 'deliverPostback',
      summary: 'A verified postback, delivered to the application',
      description: [
        `With \`${setting.forwardUrl.env}\` set, the sidecar receives the gateway's postbacks, verifies them (spec 6)`,
        `and POSTs each payload to that URL. \`${setting.delivery.env}\`: \`direct\` delivers while the gateway waits`,
        'for its answer; `queued` stores the postback, answers the gateway, and delivers from the inbox, at least',
        'once. Every attempt of one postback has the same `webhook-id`: deduplicate on it. The application verifies',
        '`webhook-signature` with any Standard Webhooks library (given the raw body), stores the postback, and only',
        'then answers 2xx (docs/postbacks.md, docs/clients.md).',
      ].join(' '),
      parameters: [
        header(
          'webhook-id',
          signed,
          "The postback's id, equal to `X-Postback-Id`: the same on every attempt, redelivery and replay. Signed.",
          { pattern: POSTBACK_ID_PATTERN, examples: [POSTBACK_ID_EXAMPLE] },
        ),
        header(
          'webhook-timestamp',
          signed,
          "This attempt's time, Unix seconds (each attempt its own). Signed; refuse one more than 5 minutes away.",
          { pattern: '^[0-9]+$' },
        ),
        header(
          'webhook-signature',
          signed,
          `\`v1,\` + standard base64 of HMAC-SHA256 of \`<webhook-id>.<webhook-timestamp>.<body>\`, keyed with the bytes after \`whsec_\` of \`${setting.forwardSecretFile.env}\`; after a rotation of the secret, for an hour, two, space-separated, the new one's first. Absent only when delivery is unsigned (\`${setting.forwardSigning.env}=off\`, or staging without the secret).`,
          { pattern: `^${SIGNATURE}( ${SIGNATURE})*$` },
        ),
        header('X-Postback-Id', true, "Equal to `webhook-id` (`pb_` + 32 hex digits of the payload's SHA-256).", {
          pattern: POSTBACK_ID_PATTERN,
        }),
        header(
          'X-Postback-Verified',
          true,
          `How the sidecar verified the gateway's postback: its signature, or (\`${setting.acceptUnsigned.env}\`) its source address. Not signed: trust it only with a valid \`webhook-signature\`.`,
          { enum: ['signature', 'unsigned'] },
        ),
        header('X-Postback-Timestamp', false, "The gateway's verified `X-Timestamp` (signed postbacks).", {
          pattern: '^[0-9]+$',
        }),
        header('X-Postback-Nonce', false, "The gateway's verified `X-Nonce` (signed postbacks).", {
          pattern: '^[A-Za-z0-9_-]{16,64}$',
        }),
        header('X-Postback-Attempt', false, '`queued` delivery: the number of this attempt, from 1.', {
          pattern: '^[1-9][0-9]*$',
        }),
        header(
          'X-Request-Id',
          true,
          "The id of the postback's arrival: in the sidecar's log line and its answer to the gateway.",
          { minLength: 1 },
        ),
        header('traceparent', false, "With tracing on: the delivery's W3C trace context.", {}),
      ],
      requestBody: {
        required: true,
        description: 'The payload, `Content-Type: application/json`.',
        content: { 'application/json': { schema: { $ref: '#/components/schemas/PostbackPayload' } } },
      },
      responses: {
        '2XX': {
          description: `Stored: the sidecar is done with the postback (a postback seen before is answered 2xx again, not applied twice). Within ${timeout}. \`direct\`: the gateway is answered \`200 {"status":"forwarded"}\`; \`queued\`: recorded as delivered. Its body is ignored.`,
        },
        '401': {
          description:
            'No signature verifies, or the timestamp is out of its window: nothing stored. To the sidecar, like any answer other than 2xx.',
        },
        default: {
          description: `Any other answer, or none within ${timeout}: not delivered. \`direct\`: the gateway is answered \`503 postback.forward.failed\`, to deliver it again. \`queued\`: attempted again after the next delay of \`${setting.retrySchedule.env}\` (${jitter}), or the answer's \`Retry-After\` when longer, each attempt signed anew; after the last, a dead letter.`,
          headers: {
            'Retry-After': {
              required: false,
              description: '`queued`: the least seconds to wait before the next attempt.',
              schema: { type: 'string', pattern: '^[0-9]+$' },
            },
          },
        },
      },
    },
  };
}
