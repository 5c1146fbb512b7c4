// One request, one answer: EgressRequest.settle() as the handler and shutdown call it, and the in-flight tracking
// that waits for requests to settle before shutdown closes the state store.
import assert from 'node:assert/strict';
import { EventEmitter } from 'node:events';
import type { IncomingMessage, OutgoingHttpHeaders, ServerResponse } from 'node:http';
import { describe, it } from 'node:test';
import { sidecarErrors } from '../../src/errors.js';
import type { Ticket } from '../../src/idempotency/keeper.js';
import type { KeptAnswer } from '../../src/idempotency/record.js';
import { InFlightRequests } from '../../src/inbound/in-flight.js';
import { createLogger } from '../../src/observability/log.js';
import { requestId } from '../../src/inbound/request-id.js';
import { DeadlineList } from '../../src/time/deadline-list.js';
import type { RequestOutcome } from '../../src/egress/request-log.js';
import { errorSettlement, EgressRequest, type Settlement } from '../../src/egress/request.js';

/** What a client receives: the head and body of the one answer written, if any. */
class FakeResponse extends EventEmitter {
  headersSent = false;
  writableEnded = false;
  written: { status: number; headers: OutgoingHttpHeaders; body: string } | undefined;
  writeHead(status: number, headers: OutgoingHttpHeaders): void {
    this.headersSent = true;
    this.written = { status, headers, body: '' };
  }
  end(body: Buffer | string): void {
    this.writableEnded = true;
    if (this.written) this.written.body = body.toString();
  }
  destroy(): void {
    this.emit('close');
  }
}

/** A request whose body was read whole. */
const COMPLETE_REQUEST = { complete: true } as unknown as IncomingMessage;

interface Recorded {
  readonly lines: Array<{ outcome: RequestOutcome }>;
  readonly records: Array<{ kind: 'complete'; answer: KeptAnswer } | { kind: 'release' }>;
}

function request(options: { draining?: boolean; deadlineMs?: number; recordWrite?: Promise<void> } = {}) {
  const res = new FakeResponse();
  const recorded: Recorded = { lines: [], records: [] };
  const written = options.recordWrite ?? Promise.resolve();
  const req = new EgressRequest(
    requestId('req-1'),
    '/api/v2/transaction/init',
    COMPLETE_REQUEST,
    res as unknown as ServerResponse,
    {
      log: createLogger('silent'),
      metrics: {
        requestDone: (_route, status, code) => recorded.lines.push({ outcome: { status, code, attempts: 0 } }),
      },
      keeper: {
        complete: (_ticket, answer) => written.then(() => void recorded.records.push({ kind: 'complete', answer })),
        release: () => written.then(() => void recorded.records.push({ kind: 'release' })),
      },
      draining: () => options.draining ?? false,
      bodyBudget: { release: () => undefined },
      deadlines: new DeadlineList(options.deadlineMs ?? 60_000),
    },
  );
  return { req, res, recorded };
}

const OK: Settlement = {
  status: 200,
  code: 'ok',
  headers: {},
  body: '{}',
  keep: { kind: 'store', answer: { status: 200, headers: {}, body: Buffer.from('{}'), code: 'ok' } },
  outcome: { attempts: 1 },
};
const TICKET = { storeKey: 'k', keySha256: 'h', fingerprint: 'f', value: 'v' } as Ticket;

describe('EgressRequest: one answer per request', () => {
  it('the first answer wins; a later one is dropped', async () => {
    const { req, res } = request();
    await req.settle(errorSettlement(sidecarErrors.outcomeUnknown(504, 'shutdown'), { attempts: 0 }), 'shutdown');
    await req.settle({ ...OK, status: 201, body: '{"late":true}' });
    assert.equal(res.written?.status, 504);
  });

  it('not sent once shutdown answered: beginSending refuses, so a retryable answer stays true', async () => {
    const { req } = request();
    await req.settle(errorSettlement(sidecarErrors.shuttingDown(), { attempts: 0 }), 'shutdown');
    assert.equal(req.beginSending(), false);
    assert.equal(req.sendStarted, false);
  });

  it('beginSending marks the request as possibly at the gateway', () => {
    const { req } = request();
    assert.equal(req.beginSending(), true);
    assert.equal(req.sendStarted, true);
  });

  it('an answer written while draining carries Connection: close; before draining it does not', async () => {
    const draining = request({ draining: true });
    await draining.req.settle(OK);
    assert.equal(draining.res.written?.headers.connection, 'close');
    const serving = request({ draining: false });
    await serving.req.settle(OK);
    assert.equal(serving.res.written?.headers.connection, undefined);
  });

  it("the answer carries the request's own id and a length", async () => {
    const { req, res } = request();
    await req.settle({ ...OK, headers: { 'x-request-id': 'gateway-id' } });
    assert.equal(res.written?.headers['x-request-id'], 'req-1');
    assert.equal(res.written?.headers['content-length'], 2);
  });

  it("shutdown's answer is what the client got and what the record keeps; the handler's view is kept as late", async () => {
    const { req, res, recorded } = request();
    req.holdClaim(TICKET);
    assert.equal(req.beginSending(), true);
    await req.settle(errorSettlement(sidecarErrors.outcomeUnknown(504, 'shutdown'), { attempts: 0 }), 'shutdown');
    assert.equal(req.signal.aborted, true, "shutdown's answer ends the request's work");
    assert.equal(res.written?.status, 504);
    await req.settle(OK);
    assert.deepEqual(recorded.lines[0]?.outcome, {
      status: 504,
      code: 'sidecar.upstream.outcome_unknown',
      attempts: 0,
    });
    const record = recorded.records[0];
    assert.ok(record?.kind === 'complete', 'the record keeps an answer');
    assert.equal(record.answer.status, 504);
    assert.equal(res.written?.status, 504, 'the late answer is not written');
  });

  it('a draining answer from shutdown releases the key: the client was told nothing was sent', async () => {
    const { req, recorded } = request();
    req.holdClaim(TICKET);
    await req.settle(errorSettlement(sidecarErrors.shuttingDown(), { attempts: 0 }), 'shutdown');
    await req.settle(errorSettlement(sidecarErrors.shuttingDown(), { attempts: 0 }));
    assert.deepEqual(recorded.records, [{ kind: 'release' }]);
  });

  it('the record is written before the answer leaves: a caller retrying at once finds it', async () => {
    let recordWritten: () => void = () => undefined;
    const { req, res, recorded } = request({ recordWrite: new Promise((resolve) => (recordWritten = resolve)) });
    req.holdClaim(TICKET);
    const settling = req.settle(OK);
    await new Promise((resolve) => setImmediate(resolve));
    assert.equal(res.headersSent, false, 'no answer before the record');
    recordWritten();
    await settling;
    assert.equal(recorded.records.length, 1);
    assert.equal(res.written?.status, 200);
  });

  it('the deadline aborts its signal', async () => {
    const { req } = request({ deadlineMs: 10 });
    await new Promise((resolve) => setTimeout(resolve, 50));
    assert.equal(req.signal.aborted, true);
    assert.equal((req.signal.reason as DOMException).name, 'TimeoutError');
  });

  it('its end cuts the send in flight; a wait that asks later gets a signal already aborted, with the same reason', async () => {
    const { req } = request({ deadlineMs: 10 });
    const waiting = req.signal; // a wait that began before the deadline
    let cut = 0;
    req.whileSending(() => cut++);
    await new Promise((resolve) => setTimeout(resolve, 50));
    assert.equal(cut, 1, 'the send in flight is cut at the deadline');
    assert.equal(req.ended, true);
    assert.equal(waiting.aborted, true);
    assert.equal((req.signal.reason as DOMException).name, 'TimeoutError');
    req.whileSending(undefined);
    await req.settle(OK);
    assert.equal(cut, 1, 'once');
  });

  it("shutdown's answer cuts the send in flight; a send that finished is not cut", async () => {
    const first = request();
    let cut = 0;
    first.req.whileSending(() => cut++);
    first.req.whileSending(undefined); // its answer came
    await first.req.settle(errorSettlement(sidecarErrors.shuttingDown(), { attempts: 0 }), 'shutdown');
    assert.equal(cut, 0);
    const second = request();
    second.req.whileSending(() => cut++);
    await second.req.settle(
      errorSettlement(sidecarErrors.outcomeUnknown(504, 'shutdown'), { attempts: 0 }),
      'shutdown',
    );
    assert.equal(cut, 1);
    assert.equal(second.req.ended, true);
  });

  it("one listener's deadlines: each request's own, from its arrival; a settled request's no longer applies", async () => {
    const deadlines = new DeadlineList(60);
    const expired: string[] = [];
    const arrive = (name: string) => {
      return deadlines.add({ expire: () => expired.push(name) });
    };
    const first = arrive('first');
    arrive('second');
    deadlines.remove(first); // settled in time
    deadlines.remove(first); // again: nothing
    await new Promise((resolve) => setTimeout(resolve, 40));
    arrive('third'); // due 40 ms after the second
    await new Promise((resolve) => setTimeout(resolve, 45));
    assert.deepEqual(expired, ['second'], 'the second is due, the third not yet');
    await new Promise((resolve) => setTimeout(resolve, 60));
    assert.deepEqual(expired, ['second', 'third']);
  });
});

describe('InFlightRequests', () => {
  /** A tracked request whose connection closes, and whose handling settles, when the test says. */
  function tracked(tracker: InFlightRequests, name: string) {
    let close = (): void => undefined;
    let settle = (): void => undefined;
    const done = new Promise<void>((resolve) => (settle = resolve));
    const request = {
      name,
      isAnswered: false,
      done,
      onClose: (listener: () => void) => (close = listener),
    };
    tracker.track(request);
    return { request, close: () => close(), settle: () => settle() };
  }

  it('follows requests ending in any order: active, unanswered, idle and settled', async () => {
    const tracker = new InFlightRequests<ReturnType<typeof tracked>['request']>();
    const [a, b, c] = ['a', 'b', 'c'].map((name) => tracked(tracker, name)) as [
      ReturnType<typeof tracked>,
      ReturnType<typeof tracked>,
      ReturnType<typeof tracked>,
    ];
    b.request.isAnswered = true;
    assert.equal(tracker.active, 3);
    assert.deepEqual(
      tracker.unanswered().map((r) => r.name),
      ['a', 'c'],
    );
    let idle: boolean | undefined;
    const waiting = tracker.waitIdle(5_000).then((value) => (idle = value));
    b.close(); // the middle one first
    a.close();
    assert.equal(tracker.active, 1);
    assert.deepEqual(
      tracker.unanswered().map((r) => r.name),
      ['c'],
    );
    await new Promise((resolve) => setTimeout(resolve, 10));
    assert.equal(idle, undefined, 'c is still open');
    c.close();
    await waiting;
    assert.equal(idle, true);
    assert.equal(tracker.active, 0);
    for (const r of [c, a]) r.settle();
    assert.equal(await tracker.settled(50), false, 'b has not settled');
    b.settle();
    assert.equal(await tracker.settled(1_000), true);
  });
});

describe('InFlightRequests.settled', () => {
  it('is true at once when nothing runs', async () => {
    assert.equal(await new InFlightRequests().settled(0), true);
  });

  it("waits for every request's settlement, one tracked meanwhile included", async () => {
    const tracker = new InFlightRequests();
    const [first, second] = [request(), request()];
    tracker.track(first.req);
    let settled: boolean | undefined;
    const waiting = tracker.settled(5_000).then((value) => (settled = value));
    tracker.track(second.req);
    await first.req.settle(OK);
    await new Promise((resolve) => setTimeout(resolve, 20));
    assert.equal(settled, undefined, 'the second request is still running');
    await second.req.settle(OK);
    await waiting;
    assert.equal(settled, true);
  });

  it('gives up after its timeout: false, and the request goes on untouched', async () => {
    const tracker = new InFlightRequests();
    const stuck = request();
    tracker.track(stuck.req);
    const started = Date.now();
    assert.equal(await tracker.settled(50), false);
    assert.ok(Date.now() - started < 1_000);
    await stuck.req.settle(OK);
    assert.equal(await tracker.settled(1_000), true);
  });
});
