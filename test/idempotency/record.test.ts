import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { sidecarErrors } from '../../src/errors.js';
import { decodeRecord, encodeRecord, errorAnswer, type DoneRecord } from '../../src/idempotency/record.js';

describe('idempotency records', () => {
  it('a done record keeps status, headers and every body byte (base64 in JSON)', () => {
    const body = Buffer.from([0x7b, 0x00, 0xff, 0xfe, 0x0a, 0x22, 0x7d]);
    const record: DoneRecord = {
      state: 'done',
      fingerprint: 'f'.repeat(64),
      answer: { status: 201, headers: { 'x-gateway': 'a', 'set-cookie': ['a=1', 'b=2'] }, body, code: 'ok' },
    };
    const text = encodeRecord(record);
    assert.equal((JSON.parse(text) as { answer: { body: string } }).answer.body, body.toString('base64'));
    const back = decodeRecord(text);
    assert.deepEqual(back, record);
    assert.ok(back.state === 'done' && back.answer.body.equals(body));
  });

  it('an in_progress record keeps its owner, deadline and claim', () => {
    const record = { state: 'in_progress', fingerprint: 'f', owner: 'req-1', deadline: 1_700_000_000_000, claim: 'c' };
    assert.deepEqual(decodeRecord(encodeRecord(record as never)), record);
  });

  it('refuses anything it did not write rather than guess', () => {
    for (const text of [
      '{}',
      '{"v":2,"state":"done","fingerprint":"f"}',
      '{"v":1,"state":"in_progress","fingerprint":"f","owner":"o"}',
      '{"v":1,"state":"done","fingerprint":"f","answer":{"status":"201","headers":{},"body":"","code":"ok"}}',
      '{"v":1,"state":"gone","fingerprint":"f"}',
    ]) {
      assert.throws(() => decodeRecord(text), text);
    }
    assert.throws(() => decodeRecord('not json'));
  });

  it('a sidecar error is kept as the caller got it: status, JSON body, its code', () => {
    const error = sidecarErrors.outcomeUnknown(504, 'x');
    const answer = errorAnswer(error);
    assert.equal(answer.status, 504);
    assert.equal(answer.code, 'sidecar.upstream.outcome_unknown');
    assert.deepEqual(answer.headers, { 'content-type': 'application/json' });
    assert.equal(answer.body.toString(), JSON.stringify(error.toBody()));
  });
});
