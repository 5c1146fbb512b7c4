import assert from 'node:assert/strict';
import { EventEmitter } from 'node:events';
import type { OutgoingHttpHeaders, ServerResponse } from 'node:http';
import { describe, it } from 'node:test';
import { sidecarErrors } from '../../src/errors.js';
import { InboundExchange } from '../../src/proxy/inbound-exchange.js';
import { requestId } from '../../src/proxy/request-id.js';

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

function exchange(draining = false): { exchange: InboundExchange; res: FakeResponse } {
  const res = new FakeResponse();
  return { exchange: new InboundExchange(requestId('req-1'), res as unknown as ServerResponse, () => draining), res };
}

const OK = { status: 200, code: 'ok', attempts: 1 } as const;

describe('InboundExchange: one answer per request', () => {
  it('the first answer wins; a later one is dropped', () => {
    const { exchange: ex, res } = exchange();
    assert.equal(ex.fail(sidecarErrors.outcomeUnknown(504, 'shutdown'), 'shutdown'), true);
    assert.equal(ex.answer(201, {}, Buffer.from('{"late":true}'), 'ok'), false);
    assert.equal(res.written?.status, 504);
  });

  it('not sent once shutdown answered: beginSending refuses, so a retryable answer stays true', () => {
    const { exchange: ex } = exchange();
    ex.fail(sidecarErrors.shuttingDown(), 'shutdown');
    assert.equal(ex.beginSending(), false);
    assert.equal(ex.sendStarted, false);
  });

  it('beginSending marks the request as possibly at the gateway', () => {
    const { exchange: ex } = exchange();
    assert.equal(ex.beginSending(), true);
    assert.equal(ex.sendStarted, true);
  });

  it('an answer written while draining carries Connection: close; before draining it does not', () => {
    const draining = exchange(true);
    draining.exchange.answer(200, {}, Buffer.from('{}'), 'ok');
    assert.equal(draining.res.written?.headers.connection, 'close');
    const serving = exchange(false);
    serving.exchange.answer(200, {}, Buffer.from('{}'), 'ok');
    assert.equal(serving.res.written?.headers.connection, undefined);
  });

  it('the logged outcome is what the client got, with the handler view kept as late', () => {
    const { exchange: ex } = exchange();
    ex.fail(sidecarErrors.outcomeUnknown(504, 'shutdown'), 'shutdown');
    assert.deepEqual(ex.finalOutcome(OK), {
      ...OK,
      status: 504,
      code: 'sidecar.upstream.outcome_unknown',
      causeCode: 'ERR_SIDECAR_SHUTDOWN',
      late: { status: 200, code: 'ok' },
    });
  });

  it('a caller gone before its answer: delivered false; an answered one: the outcome unchanged', () => {
    const gone = exchange();
    gone.res.emit('close');
    assert.deepEqual(gone.exchange.finalOutcome(OK), { ...OK, delivered: false });
    const answered = exchange();
    answered.exchange.answer(200, {}, Buffer.from('{}'), 'ok');
    answered.res.emit('close');
    assert.deepEqual(answered.exchange.finalOutcome(OK), OK);
  });
});
