// What one queued delivery attempt's answer makes of the postback: delivered, retried when (the schedule or the
// application's Retry-After, whichever is later; each delay spread by a jitter), or dead after the last attempt.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { deliveryOutcomeOf } from '../../src/postback/delivery-worker.js';

const SCHEDULE = [0, 5_000, 300_000];
const NOW = 1_800_000_000_000;

describe('queued delivery: the outcome of an attempt', () => {
  it('spreads each delay by up to 10 % either way, never below a Retry-After', () => {
    const failed = { status: 500, failure: undefined };
    const due = (random: number) => {
      const outcome = deliveryOutcomeOf(2, failed, SCHEDULE, NOW, random);
      return outcome.outcome === 'retry' ? outcome.dueMs - NOW : undefined;
    };
    assert.equal(due(0), 270_000);
    assert.equal(due(0.5), 300_000);
    assert.equal(due(0.999999), 330_000);
    const floor = deliveryOutcomeOf(2, { ...failed, retryAfterSeconds: 300 }, SCHEDULE, NOW, 0);
    assert.equal(floor.outcome === 'retry' ? floor.dueMs - NOW : undefined, 300_000);
  });

  it('any 2xx delivers it; 1xx, 3xx, 4xx and 5xx do not', () => {
    for (const status of [200, 202, 204, 299]) {
      assert.deepEqual(deliveryOutcomeOf(1, { status, failure: undefined }, SCHEDULE, NOW, 0.5), {
        outcome: 'delivered',
      });
    }
    for (const status of [101, 301, 400, 404, 409, 500, 503]) {
      assert.equal(
        deliveryOutcomeOf(1, { status, failure: undefined }, SCHEDULE, NOW, 0.5).outcome,
        'retry',
        String(status),
      );
    }
  });

  it("attempt n failed: the next waits the schedule's delay n, or a longer Retry-After", () => {
    assert.deepEqual(deliveryOutcomeOf(1, { status: 500, failure: undefined }, SCHEDULE, NOW, 0.5), {
      outcome: 'retry',
      dueMs: NOW + 5_000,
      error: 'status 500',
    });
    const later = deliveryOutcomeOf(1, { status: 503, failure: undefined, retryAfterSeconds: 60 }, SCHEDULE, NOW, 0.5);
    assert.deepEqual(later, { outcome: 'retry', dueMs: NOW + 60_000, error: 'status 503' });
    const sooner = deliveryOutcomeOf(2, { status: 503, failure: undefined, retryAfterSeconds: 60 }, SCHEDULE, NOW, 0.5);
    assert.deepEqual(sooner, { outcome: 'retry', dueMs: NOW + 300_000, error: 'status 503' });
  });

  it('no answer (a timeout, a refused connection) is retried with its cause; after the last attempt it is dead', () => {
    assert.deepEqual(deliveryOutcomeOf(2, { status: undefined, failure: 'timeout' }, SCHEDULE, NOW, 0.5), {
      outcome: 'retry',
      dueMs: NOW + 300_000,
      error: 'timeout',
    });
    assert.deepEqual(deliveryOutcomeOf(3, { status: undefined, failure: 'ECONNREFUSED' }, SCHEDULE, NOW, 0.5), {
      outcome: 'dead',
      error: 'ECONNREFUSED',
    });
  });
});
