import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { createLogger, createRequestLogger, writeLine } from '../../src/observability/log.js';

function capture(): { lines: string[]; write(line: string): void } {
  const lines: string[] = [];
  return { lines, write: (line: string) => void lines.push(line) };
}

const sameTime = (line: string): string => line.replace(/"time":"[^"]*"/, '"time":"T"');

describe('writeLine', () => {
  it('writes byte for byte the line pino writes for the same fields, at every level', () => {
    const out = capture();
    const log = createRequestLogger(createLogger('info', out));
    const fields = {
      event: 'request',
      requestId: 'id-1',
      route: '/api/v2/transaction/init',
      status: 401,
      code: 'FAILED',
      // A gateway's own code is unbounded text: quotes, backslashes, control and non-ASCII characters.
      gatewayCode: 'bad "code" \\ \n \u0001 é \u2028',
      attempts: 2,
      causeCode: undefined,
      durationMs: 1.234,
      payloadBytes: 0,
      payloadSha256: undefined,
    };
    for (const level of ['info', 'warn', 'error'] as const) {
      log[level](fields, 'request answered');
      writeLine(log, level, fields, 'request answered');
    }
    assert.equal(out.lines.length, 6);
    for (let i = 0; i < 6; i += 2) assert.equal(sameTime(out.lines[i + 1]!), sameTime(out.lines[i]!));
    // Not vacuous: the lines carry the framing and the fields, and leave undefined ones out.
    const parsed = JSON.parse(out.lines[1]!) as Record<string, unknown>;
    assert.equal(parsed.level, 30);
    assert.equal(parsed.service, 'signing-sidecar');
    assert.equal(parsed.gatewayCode, fields.gatewayCode);
    assert.equal(parsed.msg, 'request answered');
    assert.equal('causeCode' in parsed, false);
    assert.match(out.lines[1]!, /\n$/);
  });
});
