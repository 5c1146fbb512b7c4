// What a `state_store.down` line says of a Redis failure (its `reason`): node-redis reports most failures as Errors,
// and some of its Sentinel client's as text.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { ErrorReply } from '@redis/client';
import { describeRedisError, RedisCommandTimeout } from '../../src/state/redis-errors.js';

describe('the reason a state_store.down line gives', () => {
  it("a Sentinel observer's failure, which node-redis emits as text, is named, not 'unknown error'", () => {
    const text = 'obseve client error: Error: connect ECONNREFUSED 127.0.0.1:26379';
    assert.equal(describeRedisError(text), text);
    assert.equal(describeRedisError(`${text}\n    at TCPConnectWrap.afterConnect`), text, 'its first line only');
    assert.equal(describeRedisError('x'.repeat(500)).length, 200, 'at most 200 characters');
  });

  it('an Error by its first line, a timeout by its own message, a reply by its code only', () => {
    assert.equal(describeRedisError(new Error('Socket closed unexpectedly\nmore')), 'Socket closed unexpectedly');
    assert.equal(describeRedisError(new RedisCommandTimeout(100)), 'timeout after 100 ms');
    assert.equal(
      describeRedisError(new ErrorReply('OOM command not allowed: key secret-value')),
      'Redis answered an error (OOM)',
    );
  });

  it("what is neither an Error nor text is 'unknown error'", () => {
    for (const thrown of [undefined, null, 42, { message: 'not an Error' }, ''])
      assert.equal(describeRedisError(thrown), 'unknown error');
  });
});
