import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { parseBaseAddress } from '../../src/config/base-url.js';
import { Secret } from '../../src/config/secret.js';
import { sidecarErrors } from '../../src/errors.js';
import { exchangeEvents } from '../../src/egress/exchange-events.js';
import { exchange, type ExchangeDeps, type ExchangeResult } from '../../src/egress/gateway-exchange.js';
import { requestSigning, type SignedCopy, type SignedRequest } from '../../src/egress/request-signing.js';
import type { TokenSet } from '../../src/token/token-set.js';
import { NO_TRACING, type TraceContext, type Tracing } from '../../src/observability/tracing.js';
import {
  endOf,
  notSent,
  sentNoAnswer,
  type SendOutcome,
  type UpstreamRequest,
} from '../../src/upstream/gateway-send.js';
import { UpstreamError } from '../../src/upstream/upstream-errors.js';
import { RecordingTracing } from '../support/recording-tracing.js';

// The retry contract (README) as a table: each send outcome, times token state, times attempt. A fake gateway client
// plays the outcomes in order; each row says how many copies the gateway receives and what the client gets.

type Step =
  | 'not_sent_transient'
  | 'not_sent_permanent'
  | 'sent_no_answer'
  | 'sent_timed_out'
  | 'failed_401'
  | 'replayed_401'
  | 'ok_200'
  | 'error_500';
type TokenState = 'valid' | 'fetched_on_demand' | 'unavailable';
type AfterRejection = 'fresh_token' | 'no_token' | 'a_token_already_sent';

interface Row {
  readonly steps: readonly Step[];
  readonly token?: TokenState;
  readonly afterRejection?: AfterRejection;
  /** Fleet mode (SIDECAR_STATE_STORE=redis): another replica's login can revoke the token just fetched. */
  readonly fleet?: boolean;
  /** The request's deadline passes (its signal aborts) right after this many calls to the gateway client. */
  readonly deadlineAfterSends?: number;
  /** The hook before the write refuses this copy (1 = the first call to the gateway client): nothing of it is written. */
  readonly refuseWrite?: number;
  /** Calls to the gateway client, including those that never left. */
  readonly sends: number;
  readonly expect: { status: number; code?: string; retryable?: boolean; attempts: number };
}

const ROWS: Record<string, Row> = {
  'a 200 goes back as is': { steps: ['ok_200'], sends: 1, expect: { status: 200, attempts: 1 } },
  'a 500 goes back as is, never resent': { steps: ['error_500'], sends: 1, expect: { status: 500, attempts: 1 } },
  'signature.nonce.replayed goes back, never resent': {
    steps: ['replayed_401'],
    sends: 1,
    expect: { status: 401, attempts: 1 },
  },
  'not sent (transient), then 200: resent with a fresh signature': {
    steps: ['not_sent_transient', 'ok_200'],
    sends: 2,
    expect: { status: 200, attempts: 1 },
  },
  'not sent (permanent, e.g. an untrusted certificate): unreachable at once, retryable': {
    steps: ['not_sent_permanent'],
    sends: 1,
    expect: { status: 502, code: 'sidecar.upstream.unreachable', retryable: true, attempts: 0 },
  },
  'sent, no answer: outcome_unknown 502, never resent': {
    steps: ['sent_no_answer'],
    sends: 1,
    expect: { status: 502, code: 'sidecar.upstream.outcome_unknown', retryable: false, attempts: 1 },
  },
  'sent, timed out: outcome_unknown 504, never resent': {
    steps: ['sent_timed_out'],
    sends: 1,
    expect: { status: 504, code: 'sidecar.upstream.outcome_unknown', retryable: false, attempts: 1 },
  },
  '401 FAILED, fresh token, then 200: sent once more': {
    steps: ['failed_401', 'ok_200'],
    afterRejection: 'fresh_token',
    sends: 2,
    expect: { status: 200, attempts: 2 },
  },
  '401 FAILED twice: the second goes back, no third send': {
    steps: ['failed_401', 'failed_401'],
    afterRejection: 'fresh_token',
    sends: 2,
    expect: { status: 401, attempts: 2 },
  },
  'fleet: 401 FAILED twice (another replica logged in meanwhile), a newer token: sent a third time': {
    steps: ['failed_401', 'failed_401', 'ok_200'],
    afterRejection: 'fresh_token',
    fleet: true,
    sends: 3,
    expect: { status: 200, attempts: 3 },
  },
  'fleet: 401 FAILED three times: the third goes back, never a fourth send': {
    steps: ['failed_401', 'failed_401', 'failed_401'],
    afterRejection: 'fresh_token',
    fleet: true,
    sends: 3,
    expect: { status: 401, attempts: 3 },
  },
  'fleet: 401 FAILED once: sent once more, as a single pod': {
    steps: ['failed_401', 'ok_200'],
    afterRejection: 'fresh_token',
    fleet: true,
    sends: 2,
    expect: { status: 200, attempts: 2 },
  },
  'fleet: 401 FAILED, and the token to send next was already sent: the 401 goes back, that token never twice': {
    steps: ['failed_401'],
    afterRejection: 'a_token_already_sent',
    fleet: true,
    sends: 1,
    expect: { status: 401, attempts: 1 },
  },
  '401 FAILED and no fresh token to be had: the gateway 401 goes back': {
    steps: ['failed_401'],
    afterRejection: 'no_token',
    sends: 1,
    expect: { status: 401, attempts: 1 },
  },
  '401 FAILED, then sent with no answer: outcome_unknown, two copies may exist': {
    steps: ['failed_401', 'sent_no_answer'],
    afterRejection: 'fresh_token',
    sends: 2,
    expect: { status: 502, code: 'sidecar.upstream.outcome_unknown', retryable: false, attempts: 2 },
  },
  '401 FAILED, then not sent (transient), then 200': {
    steps: ['failed_401', 'not_sent_transient', 'ok_200'],
    afterRejection: 'fresh_token',
    sends: 3,
    expect: { status: 200, attempts: 2 },
  },
  '401 FAILED, then the resend cannot connect (permanent): the gateway 401 goes back, not unreachable': {
    steps: ['failed_401', 'not_sent_permanent'],
    afterRejection: 'fresh_token',
    sends: 2,
    expect: { status: 401, attempts: 1 },
  },
  '401 FAILED, then the resend cannot connect until the deadline: the gateway 401 goes back': {
    steps: ['failed_401', 'not_sent_transient', 'ok_200'],
    afterRejection: 'fresh_token',
    deadlineAfterSends: 2,
    sends: 2,
    expect: { status: 401, attempts: 1 },
  },
  'not sent (transient), 401 FAILED, then 200': {
    steps: ['not_sent_transient', 'failed_401', 'ok_200'],
    afterRejection: 'fresh_token',
    sends: 3,
    expect: { status: 200, attempts: 2 },
  },
  'not sent (transient), and the request deadline passes meanwhile: unreachable, not tried again': {
    steps: ['not_sent_transient', 'ok_200'],
    deadlineAfterSends: 1,
    sends: 1,
    expect: { status: 502, code: 'sidecar.upstream.unreachable', retryable: true, attempts: 0 },
  },
  'the hook before the write refuses the first copy: its error goes back, nothing sent': {
    steps: [],
    refuseWrite: 1,
    sends: 1,
    expect: { status: 503, code: 'sidecar.idempotency.unavailable', retryable: true, attempts: 0 },
  },
  '401 FAILED, then the hook before the write refuses the resend: the gateway 401 goes back': {
    steps: ['failed_401'],
    afterRejection: 'fresh_token',
    refuseWrite: 2,
    sends: 2,
    expect: { status: 401, attempts: 1 },
  },
  'no token yet, one is fetched on demand: sent': {
    steps: ['ok_200'],
    token: 'fetched_on_demand',
    sends: 1,
    expect: { status: 200, attempts: 1 },
  },
  'no token to be had: token.unavailable, nothing sent': {
    steps: [],
    token: 'unavailable',
    sends: 0,
    expect: { status: 503, code: 'sidecar.token.unavailable', retryable: true, attempts: 0 },
  },
};

function tokenSet(generation: number): TokenSet {
  return {
    generation,
    accessToken: new Secret(`access-${generation}`),
    refreshToken: new Secret(`refresh-${generation}`),
    accessExpiresAtMs: 0,
    refreshExpiresAtMs: 0,
    accessDeadline: 0,
    refreshDeadline: 0,
  };
}

function outcomeOf(step: Step): SendOutcome {
  const answer = (status: number, body: object): SendOutcome => ({
    kind: 'response',
    response: { status, headers: {}, body: Buffer.from(JSON.stringify(body)) },
  });
  switch (step) {
    case 'not_sent_transient':
      return notSent(new UpstreamError('ECONNREFUSED', 'refused'), true);
    case 'not_sent_permanent':
      return notSent(new UpstreamError('UNABLE_TO_VERIFY_LEAF_SIGNATURE', 'untrusted'), false);
    case 'sent_no_answer':
      return sentNoAnswer(new UpstreamError('ECONNRESET', 'reset'), false);
    case 'sent_timed_out':
      return sentNoAnswer(new UpstreamError('ERR_GATEWAY_RESPONSE_TIMEOUT', 'slow'), true);
    case 'failed_401':
      return answer(401, { code: 'FAILED', message: 'token expired' });
    case 'replayed_401':
      return answer(401, { code: 'signature.nonce.replayed', message: 'replayed' });
    case 'ok_200':
      return answer(200, { transaction_link: 'https://pay.example/t/1' });
    case 'error_500':
      return answer(500, { message: 'oops' });
  }
}

interface Traced {
  readonly deps?: { readonly tracing?: Tracing; readonly propagateUpstream?: boolean };
  readonly trace?: TraceContext;
}

async function run(
  row: Row,
  traced: Traced = {},
): Promise<{ result: ExchangeResult<SignedCopy>; sent: UpstreamRequest[] }> {
  const steps = [...row.steps];
  const sent: UpstreamRequest[] = [];
  const noop = (): void => undefined;
  const current = tokenSet(1);
  const deadline = new AbortController();
  const requestEnd = endOf(deadline.signal);
  const tracing = traced.deps?.tracing ?? NO_TRACING;
  const clock = { timestampMs: (localMs: number) => localMs, remeasure: noop };
  const deps: ExchangeDeps<SignedRequest, SignedCopy> = {
    sign: requestSigning({
      base: parseBaseAddress('https://gateway.example.com'),
      signer: {
        kind: 'file',
        available: () => true,
        sign: (text) => Promise.resolve(Buffer.from(text).toString('base64')),
      },
      clock,
      metrics: { signed: noop },
      tracing,
      propagateUpstream: traced.deps?.propagateUpstream === true,
    }),
    events: exchangeEvents({
      metrics: { gatewayRoundTrip: noop, gatewayError: noop, retry: noop, answerMismatch: noop },
      tracing,
      clock,
    }),
    tokens: {
      usableToken: () => (row.token === undefined || row.token === 'valid' ? current : undefined),
      token: () =>
        row.token === 'unavailable' ? Promise.reject(sidecarErrors.tokenUnavailable()) : Promise.resolve(current),
      tokenAfterRejection: (generation) =>
        row.afterRejection === 'no_token'
          ? Promise.reject(sidecarErrors.tokenUnavailable())
          : row.afterRejection === 'a_token_already_sent'
            ? Promise.resolve({ ...tokenSet(generation + 1), accessToken: current.accessToken })
            : Promise.resolve(tokenSet(generation + 1)),
      shared: row.fleet === true,
    },
    gatewayClient: {
      send: async (request) => {
        sent.push(request);
        if (sent.length === row.deadlineAfterSends) deadline.abort();
        // As the gateway client does: the hook runs once a connection is lent, and its refusal is send()'s.
        await request.beforeWrite?.();
        const step = steps.shift();
        assert.ok(step !== undefined, 'the sidecar sent more often than the rules allow');
        return outcomeOf(step);
      },
    },
    connectRetryDeadlineMs: 5_000,
  };
  const envelope = { data: 'e30=', json: '{"data":"e30="}' };
  const result = await exchange(deps, {
    route: '/api/v2/transaction/init',
    target: { path: '/api/v2/transaction/init', query: '' },
    envelope,
    headers: {},
    callerHeaders: {},
    beforeWrite: () =>
      sent.length === row.refuseWrite
        ? Promise.reject(sidecarErrors.idempotencyUnavailable(new Error('store down')))
        : Promise.resolve(),
    end: requestEnd,
    trace: traced.trace,
  });
  return { result, sent };
}

describe('retry rules (the gateway exchange with a fake gatewayClient)', () => {
  for (const [name, row] of Object.entries(ROWS)) {
    it(name, async () => {
      const { result, sent } = await run(row);
      assert.equal(sent.length, row.sends, 'calls to the gatewayClient');
      assert.equal(result.attempts, row.expect.attempts, 'copies that reached (or may have reached) the gateway');
      if (result.kind === 'answered') {
        assert.equal(row.expect.code, undefined, `expected ${row.expect.code ?? ''}, got the gateway's answer`);
        assert.equal(result.response.status, row.expect.status);
      } else {
        assert.equal(result.error.status, row.expect.status);
        assert.equal(result.error.code, row.expect.code);
        assert.equal(result.error.retryable, row.expect.retryable);
      }
      const nonces = sent.map((request) => request.headers['x-nonce']);
      assert.equal(new Set(nonces).size, nonces.length, 'a fresh nonce for every send');
    });
  }

  it('every send carries the request deadline, so the connection queue and the exchange end with it', async () => {
    const { sent } = await run(ROWS['not sent (transient), then 200: resent with a fresh signature'] as Row);
    assert.ok(sent.every((request) => request.end !== undefined && !request.end.ended));
  });

  it('the send after 401 FAILED carries the fresh token, not the rejected one', async () => {
    const { sent } = await run(ROWS['401 FAILED, fresh token, then 200: sent once more'] as Row);
    assert.deepEqual(
      sent.map((request) => request.headers.authorization),
      ['Bearer access-1', 'Bearer access-2'],
    );
  });

  it('fleet: each of the three sends carries a newer token than the one before', async () => {
    const row = ROWS['fleet: 401 FAILED twice (another replica logged in meanwhile), a newer token: sent a third time'];
    const { sent } = await run(row as Row);
    assert.deepEqual(
      sent.map((request) => request.headers.authorization),
      ['Bearer access-1', 'Bearer access-2', 'Bearer access-3'],
    );
  });
});

describe('attempt spans (the gateway exchange with a recording tracing)', () => {
  const TRACE = { traceId: 'c'.repeat(32), spanId: 'd'.repeat(16), traceFlags: 1 };
  const ATTEMPT = 'POST /api/v2/transaction/init';

  it('not sent, 401 FAILED, 200: three attempt spans under the request, the wait for a fresh token', async () => {
    const tracing = new RecordingTracing();
    const { sent } = await run(ROWS['not sent (transient), 401 FAILED, then 200']!, {
      deps: { tracing },
      trace: TRACE,
    });
    const attempts = tracing.named(ATTEMPT);
    assert.deepEqual(
      attempts.map((a) => [a.attributes['sidecar.attempt'], a.attributes['sidecar.sent'], a.failed]),
      [
        [1, false, 'ECONNREFUSED'],
        [2, true, 'FAILED'],
        [3, true, false],
      ],
    );
    assert.equal(attempts[0]!.attributes['sidecar.cause_code'], 'ECONNREFUSED');
    assert.equal(attempts[1]!.attributes['sidecar.gateway_code'], 'FAILED');
    assert.equal(attempts[2]!.attributes['http.response.status_code'], 200);
    const [wait] = tracing.named('wait for a token');
    assert.equal(wait!.attributes['sidecar.token.after_rejection'], true);
    for (const span of tracing.spans) {
      assert.equal(span.parent, TRACE);
      assert.equal(span.ended, true);
      assert.equal(span.kind, span.name === ATTEMPT ? 'client' : 'internal');
    }
    assert.ok(
      sent.every((r) => r.headers.traceparent === undefined),
      'no traceparent to the gateway by default',
    );
    assert.deepEqual(
      sent.map((r) => r.trace),
      attempts.map((a) => a.context),
      "each send carries its attempt's context (a connection wait is traced under it)",
    );
  });

  it("SIDECAR_TRACE_PROPAGATE_UPSTREAM: each send carries its own attempt's traceparent", async () => {
    const tracing = new RecordingTracing();
    const row = ROWS['401 FAILED, fresh token, then 200: sent once more']!;
    const { sent } = await run(row, { deps: { tracing, propagateUpstream: true }, trace: TRACE });
    const attempts = tracing.named(ATTEMPT);
    assert.deepEqual(
      sent.map((r) => r.headers.traceparent),
      attempts.map((a) => `00-${TRACE.traceId}-${a.context.spanId}-01`),
    );
  });

  it('sent with no answer: an error span with the cause code, sent', async () => {
    const tracing = new RecordingTracing();
    await run(ROWS['sent, no answer: outcome_unknown 502, never resent']!, { deps: { tracing }, trace: TRACE });
    const [attempt] = tracing.named(ATTEMPT);
    assert.equal(attempt!.failed, 'ECONNRESET');
    assert.equal(attempt!.attributes['sidecar.sent'], true);
  });

  it('a token fetched on demand, or none to be had: the wait is a span, failed when no token came', async () => {
    const fetched = new RecordingTracing();
    await run(ROWS['no token yet, one is fetched on demand: sent']!, { deps: { tracing: fetched }, trace: TRACE });
    assert.equal(fetched.named('wait for a token')[0]!.failed, false);
    const none = new RecordingTracing();
    await run(ROWS['no token to be had: token.unavailable, nothing sent']!, { deps: { tracing: none }, trace: TRACE });
    assert.equal(none.named('wait for a token')[0]!.failed, 'sidecar.token.unavailable');
    assert.equal(none.named(ATTEMPT).length, 0);
  });
});
