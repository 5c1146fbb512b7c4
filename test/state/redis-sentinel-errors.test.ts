// Which errors of node-redis's Sentinel client fail the store's link at start: node-redis asks the Sentinels in
// rounds a second apart, reporting each one that fails. One Sentinel down while another answers must never fail the
// link, however many rounds node-redis makes (found in CI: a loaded host made it go round three times, the one
// Sentinel down counted three times, and each replica starting then took the store for failed).
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { SentinelErrors } from '../../src/state/redis-client.js';

const refused = (port: number): Error =>
  Object.assign(new Error(`connect ECONNREFUSED 127.0.0.1:${port}`), {
    code: 'ECONNREFUSED',
    address: '127.0.0.1',
    port,
  });

/** What the link makes of each error in turn, before it first connects. */
const verdicts = (sentinels: number, errors: readonly unknown[]): boolean[] => {
  const judge = new SentinelErrors(sentinels);
  return errors.map((err) => judge.isTheLinks(err, false));
};

describe('SentinelErrors: when the link has failed before it first connects', () => {
  it('every Sentinel refusing in one round: failed at the last of them, not before', () => {
    assert.deepEqual(verdicts(3, [refused(1), refused(2), refused(3)]), [false, false, true]);
  });

  it('one Sentinel refusing round after round while the others answer: never failed', () => {
    assert.deepEqual(
      verdicts(
        3,
        Array.from({ length: 6 }, () => refused(1)),
      ),
      Array(6).fill(false),
    );
  });

  it('two of three refusing in each round: never failed; the third failing too then fails it', () => {
    const rounds = [refused(1), refused(2), refused(1), refused(2), refused(1), refused(2), refused(3)];
    assert.deepEqual(verdicts(3, rounds), [false, false, false, false, false, false, true]);
  });

  it('an error naming no address (a connect timeout) counts as one more Sentinel of the round', () => {
    const timeout = new Error('Connection timeout');
    assert.deepEqual(verdicts(3, [refused(1), timeout, timeout]), [false, false, true]);
    assert.deepEqual(verdicts(3, [refused(1), timeout, refused(1), refused(2)]), [false, false, false, false]);
  });

  it("node-redis's text reports never count: each comes with the Error of the same attempt", () => {
    assert.deepEqual(verdicts(1, ['obseve client error: Error: connect ECONNREFUSED 127.0.0.1:1', refused(1)]), [
      false,
      true,
    ]);
  });

  it('once connected: an error while ready is a Sentinel’s, one while moving to a new primary the link’s', () => {
    const judge = new SentinelErrors(3);
    judge.connected();
    assert.equal(judge.isTheLinks(refused(1), true), false);
    assert.equal(judge.isTheLinks(refused(1), false), true);
  });
});
