// The proxy's calls still running: shutdown waits for them (bounded) before it closes the state store.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { PendingCalls } from '../../src/proxy/pending-calls.js';

function deferred(): { promise: Promise<void>; resolve: () => void; reject: (err: Error) => void } {
  let resolve: () => void = () => undefined;
  let reject: (err: Error) => void = () => undefined;
  const promise = new Promise<void>((res, rej) => {
    resolve = res;
    reject = rej;
  });
  return { promise, resolve, reject };
}

describe('PendingCalls.idle', () => {
  it('is true at once when nothing runs', async () => {
    assert.equal(await new PendingCalls().idle(0), true);
  });

  it('waits for every call, a failed one included, and for a call started meanwhile', async () => {
    const calls = new PendingCalls();
    const [first, second, third] = [deferred(), deferred(), deferred()];
    calls.track(first.promise);
    calls.track(second.promise);
    let idle: boolean | undefined;
    const waiting = calls.idle(5_000).then((value) => (idle = value));
    first.resolve();
    calls.track(third.promise);
    second.reject(new Error('failed'));
    await new Promise((resolve) => setTimeout(resolve, 20));
    assert.equal(idle, undefined, 'the third call is still running');
    third.resolve();
    await waiting;
    assert.equal(idle, true);
  });

  it('gives up after its timeout: false, and the call goes on untouched', async () => {
    const calls = new PendingCalls();
    const stuck = deferred();
    calls.track(stuck.promise);
    const started = Date.now();
    assert.equal(await calls.idle(50), false);
    assert.ok(Date.now() - started < 1_000);
    stuck.resolve();
    assert.equal(await calls.idle(1_000), true);
  });
});
