// The postback the application receives is the one the contract describes (webhooks.postback of the document the
// sidecar serves): every header it gets is declared, the required ones are there, each one and the body match their
// schemas (ajv, JSON Schema 2020-12), and the signature verifies with the reference Standard Webhooks library. Direct
// and queued delivery, signed and unsigned; and what the application's answers make the sidecar do, as described:
// a non-2xx is `503 postback.forward.failed` to the gateway (direct) or another attempt (queued), a 2xx ends it.
import assert from 'node:assert/strict';
import type { IncomingHttpHeaders } from 'node:http';
import { after, before, describe, it } from 'node:test';
import { Ajv2020 } from 'ajv/dist/2020.js';
import {
  ApplicationStub,
  deliver,
  forwardSecretFile,
  gatewayKeys,
  newForwardSecret,
  payloadJson,
  signPostback,
  startSignedReceiver,
  verifyAsApplication,
  type Received,
  type ReceiverWorld,
} from '../postback/support.js';
import type { TestKeys } from '../support/keys.js';
import { startRedis } from '../support/redis-server.js';

/** Headers of HTTP itself, not the contract's to declare. */
const TRANSPORT_HEADERS = new Set(['host', 'connection', 'content-length', 'content-type', 'transfer-encoding']);
const DOCUMENT_ID = 'https://signing-sidecar.invalid/openapi.json';
const WEBHOOK = '/webhooks/postback/post';

interface HeaderParameter {
  readonly name: string;
  readonly required: boolean;
}

/** The problems of one delivery the application received, against the document's webhooks.postback. */
function deliveryChecker(document: Record<string, unknown>): (received: Received) => string[] {
  const ajv = new Ajv2020({ strict: false, allErrors: true });
  ajv.addSchema({ ...document, $id: DOCUMENT_ID });
  const webhook = (document.webhooks as { postback: { post: { parameters: HeaderParameter[] } } }).postback.post;
  const body = ajv.getSchema(`${DOCUMENT_ID}#${WEBHOOK}/requestBody/content/application~1json/schema`)!;
  return ({ headers, body: raw }) => {
    const problems: string[] = [];
    const declared = new Set(webhook.parameters.map((parameter) => parameter.name.toLowerCase()));
    for (const name of Object.keys(headers))
      if (!declared.has(name) && !TRANSPORT_HEADERS.has(name)) problems.push(`header ${name} is not declared`);
    webhook.parameters.forEach((parameter, i) => {
      const value = headers[parameter.name.toLowerCase()];
      if (value === undefined) {
        if (parameter.required) problems.push(`header ${parameter.name} is required, absent`);
        return;
      }
      const validate = ajv.getSchema(`${DOCUMENT_ID}#${WEBHOOK}/parameters/${i}/schema`)!;
      if (!validate(value))
        problems.push(`header ${parameter.name} ${String(value)}: ${ajv.errorsText(validate.errors)}`);
    });
    if (headers['content-type'] !== 'application/json') problems.push(`content-type ${headers['content-type']}`);
    if (!body(JSON.parse(raw.toString('utf8')))) problems.push(`body: ${ajv.errorsText(body.errors)}`);
    return problems;
  };
}

const cleanups: Array<() => Promise<void>> = [];
after(async () => {
  for (const cleanup of cleanups.reverse()) await cleanup().catch(() => undefined);
});

let gateway: TestKeys;
before(async () => {
  gateway = await gatewayKeys();
});

/** A receiver delivering to an application that answers 503 to the first attempt, then 200. */
async function world(env: NodeJS.ProcessEnv): Promise<{ world: ReceiverWorld; check: (r: Received) => string[] }> {
  const application = await new ApplicationStub().start();
  let failures = 1;
  application.status = () => (failures-- > 0 ? 503 : 200);
  const running = await startSignedReceiver(gateway, env, application);
  cleanups.push(() => running.stop());
  const served = await fetch(`${running.running.sidecar.adminUrl}/openapi.json`);
  return { world: running, check: deliveryChecker((await served.json()) as Record<string, unknown>) };
}

function assertDelivery(check: (r: Received) => string[], received: Received, secret?: string): void {
  assert.deepEqual(check(received), [], JSON.stringify(received.headers));
  if (secret !== undefined) verifyAsApplication(secret, received);
  const { 'webhook-id': webhookId, 'x-postback-id': postbackId } = received.headers;
  if (webhookId !== undefined) assert.equal(webhookId, postbackId, 'webhook-id is X-Postback-Id');
}

const ids = (received: readonly Received[]): Array<IncomingHttpHeaders[string]> =>
  received.map((r) => r.headers['x-postback-id']);

describe('webhooks.postback: what the application receives, and what its answers do', { timeout: 60_000 }, () => {
  it('direct, signed: a 503 makes the gateway`s answer 503 forward_failed; its redelivery, answered 200, is forwarded', async () => {
    const secret = newForwardSecret();
    const { world: w, check } = await world({ SIDECAR_POSTBACK_FORWARD_SECRET_FILE: await forwardSecretFile(secret) });
    const postback = await signPostback(gateway.privateKeyPem, { payload: payloadJson() });
    const first = await deliver(w.receiverUrl, postback);
    assert.deepEqual([first.status, first.code], [503, 'postback.forward.failed']);
    const again = await deliver(w.receiverUrl, postback);
    assert.deepEqual([again.status, again.body], [200, { status: 'forwarded' }]);
    assert.equal(w.application.received.length, 2);
    for (const received of w.application.received) assertDelivery(check, received, secret);
    assert.equal(new Set(ids(w.application.received)).size, 1, 'one webhook-id for both attempts');
  });

  it('direct, unsigned (staging without a secret): the document does not require the signature headers', async () => {
    const { world: w, check } = await world({});
    const postback = await signPostback(gateway.privateKeyPem);
    assert.equal((await deliver(w.receiverUrl, postback)).status, 503);
    assert.equal((await deliver(w.receiverUrl, postback)).status, 200);
    for (const received of w.application.received) {
      assert.equal(received.headers['webhook-signature'], undefined);
      assertDelivery(check, received);
    }
  });

  it('queued, signed: accepted at once; a 503 is attempted again (X-Postback-Attempt 2), a 200 ends it', async () => {
    const redis = await startRedis();
    cleanups.push(() => redis.close());
    const secret = newForwardSecret();
    const { world: w, check } = await world({
      SIDECAR_POSTBACK_FORWARD_SECRET_FILE: await forwardSecretFile(secret),
      SIDECAR_STATE_STORE: 'redis',
      SIDECAR_REDIS_URL: redis.url,
      SIDECAR_POSTBACK_DELIVERY: 'queued',
      SIDECAR_POSTBACK_RETRY_SCHEDULE: '0s,200ms,200ms',
      SIDECAR_POSTBACK_VISIBILITY_TIMEOUT_MS: '3000',
      SIDECAR_POSTBACK_FORWARD_TIMEOUT_MS: '2000',
    });
    const answer = await deliver(w.receiverUrl, await signPostback(gateway.privateKeyPem));
    assert.deepEqual(answer.body, { status: 'accepted' });
    await w.application.waitFor(2, 20_000);
    // No third attempt after the 200.
    await new Promise((resolve) => setTimeout(resolve, 600));
    assert.deepEqual(
      w.application.received.map((r) => r.headers['x-postback-attempt']),
      ['1', '2'],
    );
    for (const received of w.application.received) assertDelivery(check, received, secret);
    assert.equal(new Set(ids(w.application.received)).size, 1);
  });
});
