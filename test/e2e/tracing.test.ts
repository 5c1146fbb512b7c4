// Traces as a collector receives them: the sidecar exports OTLP/HTTP to a receiver in this test, configured only by
// the OpenTelemetry SDK's own environment, and the spans are checked for their shape (one trace from the caller's
// traceparent through the attempts, grants and postback deliveries) and for what they must never hold.
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import { makeKeys, type TestKeys } from '../support/keys.js';
import { OtlpReceiver, SPAN_KIND, STATUS_ERROR, type ReceivedSpan } from '../support/otlp-receiver.js';
import { TEST_PASSWORD } from '../support/recording-gateway.js';
import { withReadySidecar, type ReadySidecar } from '../support/sidecar.js';
import { depositJson } from '../support/payloads.js';
import { deliver, signPostback, startSignedReceiver } from '../postback/support.js';
import { startRedis } from '../support/redis-server.js';

const ROUTE = '/api/v2/transaction/init';
/** Payload values that must reach no span: they stand for the customer's data. */
const PAYLOAD = depositJson({ invoice_no: 'inv-trace-secret-4417', user_id: 'user-trace-secret-2203' });

interface Caller {
  readonly traceId: string;
  readonly spanId: string;
  readonly traceparent: string;
}

function callerContext(): Caller {
  const traceId = randomBytes(16).toString('hex');
  const spanId = randomBytes(8).toString('hex');
  return { traceId, spanId, traceparent: `00-${traceId}-${spanId}-01` };
}

async function post(
  proxyUrl: string,
  headers: Record<string, string> = {},
): Promise<{ status: number; body: string; requestId: string }> {
  const response = await fetch(`${proxyUrl}${ROUTE}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: PAYLOAD,
    signal: AbortSignal.timeout(15_000),
  });
  return {
    status: response.status,
    body: await response.text(),
    requestId: response.headers.get('x-request-id') ?? '',
  };
}

/**
 * The exporter reads its endpoint and batching from the process environment, as it does in production; each test
 * file runs in its own process, so setting it here touches no other test. The same variables go to the sidecar's
 * settings, which decide from them that tracing is on.
 */
function otelEnv(receiver: OtlpReceiver, extra: NodeJS.ProcessEnv = {}): NodeJS.ProcessEnv {
  const env = {
    OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: `${receiver.url}/v1/traces`,
    OTEL_BSP_SCHEDULE_DELAY: '20',
    ...extra,
  };
  Object.assign(process.env, env);
  return env;
}

const serverSpan = (spans: readonly ReceivedSpan[], traceId: string) =>
  spans.find((s) => s.traceId === traceId && s.kind === SPAN_KIND.server);
const attemptSpans = (spans: readonly ReceivedSpan[], traceId: string) =>
  spans.filter((s) => s.traceId === traceId && s.kind === SPAN_KIND.client && s.name === `POST ${ROUTE}`);

/** Waits for a request's server span (ended before its answer, exported soon after) and returns its trace. */
async function traceOf(receiver: OtlpReceiver, traceId: string, attempts: number): Promise<ReceivedSpan[]> {
  await receiver.until(`trace ${traceId}`, (spans) => {
    return serverSpan(spans, traceId) !== undefined && attemptSpans(spans, traceId).length >= attempts;
  });
  return receiver.trace(traceId);
}

describe('OpenTelemetry traces of the egress path (tracing on, propagation to the gateway off)', () => {
  const receiver = new OtlpReceiver();
  let ready: ReadySidecar;
  let finish: () => void = () => undefined;
  let stopped: Promise<void> = Promise.resolve();
  let keys: TestKeys;
  const idempotencyKey = `key-${randomBytes(12).toString('hex')}`;

  before(async () => {
    await receiver.start();
    keys = await makeKeys();
    const env = otelEnv(receiver, { OTEL_SERVICE_NAME: 'payments-egress' });
    // One sidecar for the whole describe: the secret check at the end reads the spans of every case.
    let started: () => void = () => undefined;
    const up = new Promise<void>((resolve) => (started = resolve));
    const done = new Promise<void>((resolve) => (finish = resolve));
    stopped = withReadySidecar(env, async (r) => {
      ready = r;
      started();
      await done;
    });
    await Promise.race([up, stopped]);
  });

  after(async () => {
    finish();
    await stopped;
    await receiver.stop();
  });

  it("continues the caller's trace: server span, attempt span, ids on the log line; nothing sent to the gateway", async () => {
    const caller = callerContext();
    const answer = await post(ready.running.sidecar.egressUrl, {
      traceparent: caller.traceparent,
      tracestate: 'caller=opaque',
      'idempotency-key': idempotencyKey,
    });
    assert.equal(answer.status, 201);
    const trace = await traceOf(receiver, caller.traceId, 1);
    const server = serverSpan(trace, caller.traceId)!;
    assert.equal(server.parentSpanId, caller.spanId, "the server span's parent is the caller's span");
    assert.equal(server.name, `POST ${ROUTE}`);
    assert.equal(server.resource['service.name'], 'payments-egress', 'OTEL_SERVICE_NAME names the service');
    assert.equal(server.attributes['http.route'], ROUTE);
    assert.equal(server.attributes['http.response.status_code'], 201);
    assert.equal(server.attributes['sidecar.code'], 'ok');
    assert.equal(server.attributes['sidecar.attempts'], 1);
    assert.equal(server.attributes['sidecar.idempotency'], 'new');
    assert.equal(server.attributes['sidecar.request_id'], answer.requestId);
    assert.notEqual(server.statusCode, STATUS_ERROR);
    const [attempt] = attemptSpans(trace, caller.traceId);
    assert.ok(attempt);
    assert.equal(attempt.parentSpanId, server.spanId);
    assert.equal(attempt.attributes['sidecar.sent'], true);
    assert.equal(attempt.attributes['sidecar.attempt'], 1);
    assert.equal(attempt.attributes['http.response.status_code'], 201);

    const line = ready.running.logs.lines().find((l) => l.event === 'request' && l.requestId === answer.requestId);
    assert.equal(line?.traceId, caller.traceId, 'the log line joins the trace');
    assert.equal(line?.spanId, server.spanId);

    const sent = ready.gateway.requests.at(-1)!;
    assert.equal(sent.headers.traceparent, undefined, "the caller's traceparent is not forwarded to the gateway");
    assert.equal(sent.headers.tracestate, undefined);
  });

  it('a request without a traceparent starts a trace at the sidecar', async () => {
    const answer = await post(ready.running.sidecar.egressUrl);
    assert.equal(answer.status, 201);
    await receiver.until('the server span', (spans) =>
      spans.some((s) => s.kind === SPAN_KIND.server && s.attributes['sidecar.request_id'] === answer.requestId),
    );
    const server = receiver.spans.find((s) => s.attributes['sidecar.request_id'] === answer.requestId)!;
    assert.equal(server.parentSpanId, '');
    assert.equal(server.attributes['sidecar.idempotency'], 'none');
    assert.equal((await traceOf(receiver, server.traceId, 1)).length >= 2, true);
    assert.equal(ready.gateway.requests.at(-1)!.headers.traceparent, undefined);
  });

  it('401 FAILED, then a fresh token: two attempt spans, the wait and the grant in the same trace', async () => {
    ready.gateway.revokeAccessToken(ready.gateway.issuedAccessTokens.at(-1)!);
    const caller = callerContext();
    const answer = await post(ready.running.sidecar.egressUrl, { traceparent: caller.traceparent });
    assert.equal(answer.status, 201);
    await receiver.until('the grant span', (spans) =>
      spans.some((s) => s.traceId === caller.traceId && s.name === 'token grant'),
    );
    const trace = await traceOf(receiver, caller.traceId, 2);
    const server = serverSpan(trace, caller.traceId)!;
    assert.equal(server.attributes['sidecar.attempts'], 2);
    const attempts = attemptSpans(trace, caller.traceId).sort(
      (a, b) => Number(a.attributes['sidecar.attempt']) - Number(b.attributes['sidecar.attempt']),
    );
    assert.equal(attempts.length, 2);
    assert.equal(attempts[0]!.attributes['http.response.status_code'], 401);
    assert.equal(attempts[0]!.attributes['sidecar.gateway_code'], 'FAILED');
    assert.equal(attempts[0]!.statusCode, STATUS_ERROR);
    assert.equal(attempts[1]!.attributes['http.response.status_code'], 201);
    const wait = trace.find((s) => s.name === 'wait for a token');
    assert.ok(wait, 'the wait for a fresh token is a span');
    assert.equal(wait.parentSpanId, server.spanId);
    const grant = trace.find((s) => s.name === 'token grant')!;
    assert.equal(grant.parentSpanId, wait.spanId, 'the grant is traced under the wait that started it');
    assert.equal(grant.kind, SPAN_KIND.client);
    assert.equal(grant.attributes['sidecar.token.grant'], 'refresh_token');
    assert.equal(grant.attributes['sidecar.token.outcome'], 'success');
  });

  it('outcome_unknown: the server span and the attempt span are errors with the cause code', async () => {
    ready.gateway.script.push({ reset: true });
    const caller = callerContext();
    const answer = await post(ready.running.sidecar.egressUrl, { traceparent: caller.traceparent });
    assert.equal(answer.status, 502);
    const trace = await traceOf(receiver, caller.traceId, 1);
    const server = serverSpan(trace, caller.traceId)!;
    assert.equal(server.statusCode, STATUS_ERROR);
    assert.equal(server.attributes['sidecar.code'], 'sidecar.upstream.outcome_unknown');
    const cause = server.attributes['sidecar.cause_code'];
    assert.equal(typeof cause, 'string');
    assert.notEqual(cause, '');
    const [attempt] = attemptSpans(trace, caller.traceId);
    assert.equal(attempt!.statusCode, STATUS_ERROR);
    assert.equal(attempt!.attributes['sidecar.sent'], true);
    assert.equal(attempt!.attributes['sidecar.cause_code'], cause);
    assert.equal(attempt!.attributes['error.type'], cause);
  });

  it('no exported byte holds the password, a token, a signature, the private key, the payload or the key', async () => {
    // The start's password login is a span too: wait for it, so that its grant is among the checked bytes.
    await receiver.until('the login span', (spans) =>
      spans.some((s) => s.name === 'token grant' && s.attributes['sidecar.token.grant'] === 'password'),
    );
    const { gateway } = ready;
    const text = receiver.bodies.join('\n');
    assert.ok(receiver.contentTypes.every((t) => t.startsWith('application/json')));
    const secrets: Array<[string, string]> = [
      ['password', TEST_PASSWORD],
      ['Idempotency-Key', idempotencyKey],
      ['payload field', 'inv-trace-secret-4417'],
      ['payload field', 'user-trace-secret-2203'],
      ['payload (base64)', Buffer.from(PAYLOAD).toString('base64').slice(0, 40)],
      ['private key', keys.privateKeyPem.split('\n')[5]!],
      ...gateway.issuedAccessTokens.map((t): [string, string] => ['access token', t]),
      ...gateway.issuedRefreshTokens.map((t): [string, string] => ['refresh token', t]),
      ...gateway.requests.map((r): [string, string] => ['signature', String(r.headers['x-signature'])]),
      ...gateway.requests.map((r): [string, string] => ['nonce', String(r.headers['x-nonce'])]),
    ];
    for (const [what, value] of secrets) assert.ok(!text.includes(value), `a span holds the ${what}`);
    assert.doesNotMatch(text, /authorization|bearer|x-signature|"data"/i);
  });
});

describe('SIDECAR_TRACE_PROPAGATE_UPSTREAM=true', () => {
  it("each attempt carries its own traceparent to the gateway (the caller's trace, the attempt span's id)", async () => {
    const receiver = await new OtlpReceiver().start();
    try {
      const env = otelEnv(receiver, { SIDECAR_TRACE_PROPAGATE_UPSTREAM: 'true' });
      await withReadySidecar(env, async ({ gateway, running }) => {
        const caller = callerContext();
        const answer = await post(running.sidecar.egressUrl, { traceparent: caller.traceparent });
        assert.equal(answer.status, 201);
        const [attempt] = attemptSpans(await traceOf(receiver, caller.traceId, 1), caller.traceId);
        const sent = gateway.requests.at(-1)!.headers.traceparent;
        assert.equal(sent, `00-${caller.traceId}-${attempt!.spanId}-01`);
        assert.notEqual(sent, caller.traceparent);
      });
    } finally {
      await receiver.stop();
    }
  });
});

describe('tracing off', () => {
  it("nothing of the caller's trace context reaches the gateway, and the log line has no trace ids", async () => {
    await withReadySidecar({}, async ({ gateway, running }) => {
      const caller = callerContext();
      const answer = await post(running.sidecar.egressUrl, { traceparent: caller.traceparent, tracestate: 'a=1' });
      assert.equal(answer.status, 201);
      const sent = gateway.requests.at(-1)!.headers;
      assert.equal(sent.traceparent, undefined);
      assert.equal(sent.tracestate, undefined);
      const line = running.logs.lines().find((l) => l.event === 'request' && l.requestId === answer.requestId);
      assert.ok(line);
      assert.equal('traceId' in line, false);
      assert.equal('spanId' in line, false);
    });
  });

  it("with SIDECAR_TRACE_PROPAGATE_UPSTREAM=true the sidecar is no hop of the trace: the caller's context passes as is", async () => {
    await withReadySidecar({ SIDECAR_TRACE_PROPAGATE_UPSTREAM: 'true' }, async ({ gateway, running }) => {
      const caller = callerContext();
      const answer = await post(running.sidecar.egressUrl, { traceparent: caller.traceparent, tracestate: 'a=1' });
      assert.equal(answer.status, 201);
      const sent = gateway.requests.at(-1)!.headers;
      assert.equal(sent.traceparent, caller.traceparent);
      assert.equal(sent.tracestate, 'a=1');
    });
  });
});

describe('postback traces', () => {
  it('the receive span and the delivery span; the application gets the delivery span as its traceparent', async () => {
    const receiver = await new OtlpReceiver().start();
    const gatewayKeys = await makeKeys();
    const world = await startSignedReceiver(gatewayKeys, otelEnv(receiver));
    try {
      const postback = await signPostback(gatewayKeys.privateKeyPem);
      const delivered = await deliver(world.receiverUrl, postback);
      assert.equal(delivered.status, 200);
      await world.application.waitFor(1);
      await receiver.until('the postback spans', (spans) => spans.some((s) => s.name === 'postback receive'));
      const receive = receiver.spans.find((s) => s.name === 'postback receive')!;
      const delivery = receiver.spans.find((s) => s.name === 'postback delivery')!;
      assert.equal(receive.kind, SPAN_KIND.server);
      assert.equal(receive.parentSpanId, '', "a third party's postback starts a trace");
      assert.equal(receive.attributes['sidecar.postback.outcome'], 'forwarded');
      assert.equal(delivery.kind, SPAN_KIND.client);
      assert.equal(delivery.traceId, receive.traceId);
      assert.equal(delivery.parentSpanId, receive.spanId);
      assert.equal(delivery.attributes['http.response.status_code'], 200);
      const headers = world.application.received[0]!.headers;
      assert.equal(headers.traceparent, `00-${receive.traceId}-${delivery.spanId}-01`);
      const line = world.running.logs.lines().find((l) => l.event === 'postback');
      assert.equal(line?.traceId, receive.traceId);
      const text = receiver.bodies.join('\n');
      for (const value of [postback.data.slice(0, 40), 'inv-secret-', postback.headers['x-signature']!]) {
        assert.ok(!text.includes(value), 'no span holds the postback or its signature');
      }
    } finally {
      await world.stop();
      await receiver.stop();
    }
  });

  it("queued: a span per attempt under the arrival's, each attempt's traceparent to the application", async () => {
    const [receiver, redis] = [await new OtlpReceiver().start(), await startRedis()];
    const gatewayKeys = await makeKeys();
    const world = await startSignedReceiver(gatewayKeys, {
      ...otelEnv(receiver),
      SIDECAR_STATE_STORE: 'redis',
      SIDECAR_REDIS_URL: redis.url,
      SIDECAR_POSTBACK_DELIVERY: 'queued',
      SIDECAR_POSTBACK_RETRY_SCHEDULE: '0s,200ms',
    });
    // The application is down for the first attempt and up for the second.
    let answered = 0;
    world.application.status = () => (++answered === 1 ? 503 : 200);
    try {
      const postback = await signPostback(gatewayKeys.privateKeyPem);
      const delivered = await deliver(world.receiverUrl, postback);
      assert.deepEqual(delivered.body, { status: 'accepted' });
      await world.application.waitFor(2);
      const attemptsOf = (spans: readonly ReceivedSpan[]) => spans.filter((s) => s.name === 'postback delivery');
      await receiver.until('the receive span and both attempt spans', (spans) => {
        return spans.some((s) => s.name === 'postback receive') && attemptsOf(spans).length === 2;
      });
      const receive = receiver.spans.find((s) => s.name === 'postback receive')!;
      assert.equal(receive.attributes['sidecar.postback.outcome'], 'accepted');
      const attempts = attemptsOf(receiver.spans).sort(
        (a, b) => Number(a.attributes['sidecar.postback.attempt']) - Number(b.attributes['sidecar.postback.attempt']),
      );
      const id = world.application.received[0]!.headers['x-postback-id'];
      assert.equal(typeof id, 'string');
      for (const [i, attempt] of attempts.entries()) {
        assert.equal(attempt.kind, SPAN_KIND.client);
        assert.equal(attempt.traceId, receive.traceId, "each attempt is in the arrival's trace");
        assert.equal(attempt.parentSpanId, receive.spanId, "each attempt is a child of the arrival's span");
        assert.equal(attempt.attributes['sidecar.postback.id'], id);
        assert.equal(attempt.attributes['sidecar.postback.attempt'], i + 1);
        assert.equal(
          world.application.received[i]!.headers.traceparent,
          `00-${receive.traceId}-${attempt.spanId}-01`,
          "the application's spans join under the attempt that carried them",
        );
      }
      assert.equal(attempts[0]!.attributes['http.response.status_code'], 503);
      assert.equal(attempts[0]!.attributes['sidecar.postback.delivery_outcome'], 'retry');
      assert.equal(attempts[0]!.statusCode, STATUS_ERROR);
      assert.equal(attempts[1]!.attributes['http.response.status_code'], 200);
      assert.equal(attempts[1]!.attributes['sidecar.postback.delivery_outcome'], 'delivered');
      assert.notEqual(attempts[1]!.statusCode, STATUS_ERROR);
      const text = receiver.bodies.join('\n');
      for (const value of [postback.data.slice(0, 40), 'inv-secret-', postback.headers['x-signature']!]) {
        assert.ok(!text.includes(value), 'no span holds the postback or its signature');
      }
    } finally {
      await world.stop();
      await receiver.stop();
      await redis.close();
    }
  });
});
