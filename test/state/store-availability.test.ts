import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { createLogger } from '../../src/observability/log.js';
import { StoreAvailability } from '../../src/state/store-availability.js';
import { CapturedOutput } from '../support/sidecar.js';

describe('StoreAvailability: what operators and callers hear of the store coming and going', () => {
  it('logs each transition once, listeners hear only real changes, a throwing listener stops no other', () => {
    const logs = new CapturedOutput();
    const availability = new StoreAvailability(createLogger('debug', logs), 'redis');
    const heard: boolean[] = [];
    availability.onChange(() => {
      throw new Error('listener bug');
    });
    availability.onChange((available) => heard.push(available));
    availability.down('connect ECONNREFUSED 127.0.0.1:6379'); // at start: was never available
    availability.down('connect ECONNREFUSED 127.0.0.1:6379');
    assert.equal(availability.downReason, 'connect ECONNREFUSED 127.0.0.1:6379');
    availability.up();
    availability.up();
    assert.deepEqual(heard, [true]);
    const lines = logs.lines().filter((line) => String(line.event).startsWith('state_store.'));
    assert.deepEqual(
      lines.map((line) => [line.event, line.level]),
      [
        ['state_store.down', 40],
        ['state_store.up', 30],
        ['state_store.listener_error', 50],
      ],
    );
  });

  it('a store that flaps logs its further transitions at debug, while listeners follow every one', () => {
    const logs = new CapturedOutput();
    const availability = new StoreAvailability(createLogger('debug', logs), 'redis');
    const heard: boolean[] = [];
    availability.onChange((available) => heard.push(available));
    availability.up();
    for (let i = 0; i < 3; i++) {
      availability.down('Redis answered an error (OOM)');
      availability.up();
    }
    assert.deepEqual(heard, [true, false, true, false, true, false, true]);
    const levels = logs.lines().map((line) => [line.event, line.level]);
    assert.deepEqual(levels, [
      ['state_store.connected', 30],
      ['state_store.down', 40],
      ['state_store.up', 30],
      ['state_store.down', 20],
      ['state_store.up', 20],
      ['state_store.down', 20],
      ['state_store.up', 20],
    ]);
  });

  it('whenAvailable waits for up; with settle it answers false at the first failure', async () => {
    const availability = new StoreAvailability(undefined, 'redis');
    const settled = availability.whenAvailable(5_000, true);
    const waiting = availability.whenAvailable(5_000);
    availability.down('timeout after 100 ms');
    assert.equal(await settled, false);
    availability.up();
    assert.equal(await waiting, true);
    assert.equal(await availability.whenAvailable(10), true);
  });

  it('an aborted signal ends its own wait with false; other waits go on', async () => {
    const availability = new StoreAvailability(undefined, 'redis');
    const stop = new AbortController();
    const mine = availability.whenAvailable(60_000, true, stop.signal);
    const other = availability.whenAvailable(60_000, true);
    stop.abort();
    assert.equal(await mine, false);
    availability.up();
    assert.equal(await other, true);
    assert.equal(await availability.whenAvailable(60_000, true, stop.signal), false, 'aborted before it began');
  });

  it('closing ends every wait at once with false, and no later wait starts', async () => {
    const availability = new StoreAvailability(undefined, 'redis');
    const waiting = availability.whenAvailable(60_000);
    const startedAt = Date.now();
    availability.close();
    assert.equal(await waiting, false);
    assert.ok(Date.now() - startedAt < 1_000, 'not held until the timeout');
    availability.up();
    assert.equal(await availability.whenAvailable(60_000), false, 'a closed store is not waited for');
  });
});
