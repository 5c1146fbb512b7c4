import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { describe, it } from 'node:test';
import { requestId } from '../../src/inbound/request-id.js';

const SAFE = /^[A-Za-z0-9._:-]{1,128}$/;
const FRESH = /^([0-9a-f]{16})-[0-9a-z]+$/;

describe('request ids', () => {
  it("keeps a client's sane X-Request-Id, the first of several", () => {
    assert.equal(requestId('trace-me.42:a-b'), 'trace-me.42:a-b');
    assert.equal(requestId(['first-id', 'second-id']), 'first-id');
  });

  it('replaces an id that is unsafe to log or echo with a fresh one', () => {
    for (const unsafe of ['', 'has space', 'quote"', 'line\nbreak', 'x'.repeat(129), 'é']) {
      const id = requestId(unsafe);
      assert.notEqual(id, unsafe);
      assert.match(id, FRESH);
    }
  });

  it("makes ids that are distinct, safe to echo, and share this process's random part", () => {
    const ids = Array.from({ length: 10_000 }, () => requestId(undefined));
    assert.equal(new Set(ids).size, ids.length);
    for (const id of ids) assert.match(id, SAFE);
    assert.equal(new Set(ids.map((id) => FRESH.exec(id)?.[1])).size, 1);
  });

  it('another process (another replica, or this one restarted) makes ids of its own', () => {
    const program = `import { requestId } from ${JSON.stringify(new URL('../../src/inbound/request-id.ts', import.meta.url).href)};
      console.log(requestId(undefined));`;
    const other = execFileSync(process.execPath, ['--import', 'tsx', '--input-type=module', '--eval', program], {
      encoding: 'utf8',
      timeout: 30_000,
    }).trim();
    assert.match(other, FRESH);
    assert.notEqual(FRESH.exec(other)?.[1], FRESH.exec(requestId(undefined))?.[1]);
  });
});
