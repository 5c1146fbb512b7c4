import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { ClockCorrection, gatewayOffsetMs } from '../../src/signing/clock-correction.js';

const LOCAL = Date.parse('2026-11-23T10:00:00.000Z');
/** A Date header for a gateway whose clock is `offsetMs` ahead of LOCAL (whole seconds, as HTTP writes it). */
const dateAhead = (offsetMs: number): string => new Date(LOCAL + offsetMs).toUTCString();

function corrector(skewCorrection = true, maxCorrectionSeconds = 30) {
  const reported = { skew: [] as number[], correction: [] as number[], refused: 0 };
  const clock = new ClockCorrection(
    { skewCorrection, maxCorrectionSeconds },
    {
      clockSkew: (s) => reported.skew.push(s),
      clockCorrection: (s) => reported.correction.push(s),
      clockCorrectionRefused: () => reported.refused++,
    },
  );
  return { clock, reported };
}

describe('ClockCorrection', () => {
  it('reads the Date header at the middle of its second', () => {
    assert.equal(gatewayOffsetMs(dateAhead(10_000), LOCAL), 10_500);
    assert.equal(gatewayOffsetMs(undefined, LOCAL), undefined);
    assert.equal(gatewayOffsetMs('not a date', LOCAL), undefined);
  });

  it('off: the skew is measured, the timestamp is the local time', () => {
    const { clock, reported } = corrector(false);
    clock.observe(dateAhead(-10_000), LOCAL);
    assert.deepEqual(reported.skew, [-9.5]);
    assert.equal(clock.timestampMs(LOCAL), LOCAL);
  });

  it('on: the median of recent answers, so one odd Date does not move it', () => {
    const { clock } = corrector();
    for (let i = 0; i < 5; i++) clock.observe(dateAhead(-10_000), LOCAL);
    clock.observe(dateAhead(25_000), LOCAL);
    assert.equal(clock.timestampMs(LOCAL), LOCAL - 9_500);
  });

  it('an offset within the Date header resolution is not corrected', () => {
    const { clock } = corrector();
    clock.observe(dateAhead(0), LOCAL);
    assert.equal(clock.timestampMs(LOCAL), LOCAL);
  });

  it('beyond the maximum: refused, counted, and the correction in use stays', () => {
    const { clock, reported } = corrector(true, 30);
    clock.observe(dateAhead(-10_000), LOCAL);
    clock.remeasure(dateAhead(-40_000), LOCAL);
    assert.equal(reported.refused, 1);
    assert.equal(clock.timestampMs(LOCAL), LOCAL - 9_500);
  });

  it('a timestamp refusal re-measures from that answer alone', () => {
    const { clock, reported } = corrector();
    for (let i = 0; i < 5; i++) clock.observe(dateAhead(0), LOCAL);
    clock.remeasure(dateAhead(-20_000), LOCAL);
    assert.equal(clock.timestampMs(LOCAL), LOCAL - 19_500);
    assert.equal(reported.correction.at(-1), -19.5);
  });
});
