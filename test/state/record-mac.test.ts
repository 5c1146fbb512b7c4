// The MAC of the records kept in Redis (src/state/record-mac.ts): what a reader accepts and what it refuses. The
// idempotency and postback tests on a real Redis (test/idempotency/keeper-redis.test.ts, test/postback/inbox-mac.test.ts)
// show what a refusal does for a caller and for the application.
import assert from 'node:assert/strict';
import { createSecretKey, randomBytes } from 'node:crypto';
import { describe, it } from 'node:test';
import { NO_RECORD_MAC, RecordMac, type RecordRejected } from '../../src/state/record-mac.js';

const SCOPE = 'signing-sidecar:{0123456789abcdef}:';
const newKey = () => createSecretKey(randomBytes(32));

function macWith(keys = [newKey()], acceptUnsigned = false) {
  const rejected: RecordRejected[] = [];
  const mac = new RecordMac({ keys, scope: SCOPE, acceptUnsigned, onRejected: (r) => rejected.push(r) });
  return { mac, rejected };
}

const RECORD = '{"v":1,"state":"done","fingerprint":"fp","answer":{"status":201}}';

describe('record MAC', () => {
  it('a sealed record opens to its exact content; the tag is versioned and 32 bytes', () => {
    const { mac, rejected } = macWith();
    const stored = mac.seal('idempotency:aa', RECORD);
    assert.match(stored, /^mac1\.[A-Za-z0-9_-]{43}\.\{"v":1/);
    assert.equal(stored.endsWith(RECORD), true);
    assert.deepEqual(mac.open('idempotency:aa', stored), { content: RECORD });
    assert.deepEqual(rejected, []);
  });

  it('refuses a record without a MAC, one with a wrong MAC, a changed content, and each is reported without content', () => {
    const { mac, rejected } = macWith();
    const stored = mac.seal('idempotency:aa', RECORD);
    const forgedTag = `mac1.${randomBytes(32).toString('base64url')}.${RECORD}`;
    const changed = stored.replace('201', '200');
    assert.deepEqual(mac.open('idempotency:aa', RECORD), { rejected: 'unsigned' });
    assert.deepEqual(mac.open('idempotency:aa', forgedTag), { rejected: 'mismatch' });
    assert.deepEqual(mac.open('idempotency:aa', changed), { rejected: 'mismatch' });
    assert.deepEqual(mac.open('idempotency:aa', 'mac1.short.{}'), { rejected: 'unsigned' });
    assert.deepEqual(
      rejected.map((r) => [r.kind, r.reason, r.key]),
      [
        ['idempotency', 'unsigned', 'idempotency:aa'],
        ['idempotency', 'mismatch', 'idempotency:aa'],
        ['idempotency', 'mismatch', 'idempotency:aa'],
        ['idempotency', 'unsigned', 'idempotency:aa'],
      ],
    );
  });

  it('binds the record to its key: moved to another key, or to another prefix or account, it fails', () => {
    const key = newKey();
    const { mac } = macWith([key]);
    const stored = mac.seal('idempotency:aa', RECORD);
    assert.deepEqual(mac.open('idempotency:bb', stored), { rejected: 'mismatch' });
    const otherAccount = new RecordMac({
      keys: [key],
      scope: 'signing-sidecar:{fedcba9876543210}:',
      acceptUnsigned: false,
      onRejected: () => undefined,
    });
    assert.deepEqual(otherAccount.open('idempotency:aa', stored), { rejected: 'mismatch' });
  });

  it('fields kept apart (a postback hash): the tag covers each one and where one ends', () => {
    const { mac, rejected } = macWith();
    const parts = ['{"status":"SUCCESS"}', '{"content-type":"application/json"}', 'postback:order:1'];
    const tag = mac.tag('postback:entry:pb_1', parts);
    assert.equal(mac.check('postback', 'postback:entry:pb_1', parts, tag), undefined);
    // The same bytes split elsewhere between two fields.
    const shifted = ['{"status":"SUCCESS"}{', '"content-type":"application/json"}', 'postback:order:1'];
    assert.equal(mac.check('postback', 'postback:entry:pb_1', shifted, tag), 'mismatch');
    assert.equal(mac.check('postback', 'postback:entry:pb_2', parts, tag), 'mismatch');
    assert.equal(mac.check('postback', 'postback:entry:pb_1', parts, ''), 'unsigned');
    assert.deepEqual(
      rejected.map((r) => r.kind),
      ['postback', 'postback', 'postback'],
    );
  });

  it('a rotation keeps the records signed before it valid while the old key stays in the file', () => {
    const [older, newer] = [newKey(), newKey()];
    const { mac, rejected } = macWith([older]);
    const before = mac.seal('idempotency:aa', RECORD);
    mac.replaceKeys([newer, older]);
    const after = mac.seal('idempotency:aa', RECORD);
    assert.notEqual(after, before, 'signed with the new first key');
    assert.deepEqual(mac.open('idempotency:aa', before), { content: RECORD });
    assert.deepEqual(mac.open('idempotency:aa', after), { content: RECORD });
    mac.replaceKeys([newer]);
    assert.deepEqual(mac.open('idempotency:aa', before), { rejected: 'mismatch' });
    assert.equal(rejected.length, 1);
  });

  it('accepting unsigned records (a rollout) still refuses a wrong MAC', () => {
    const { mac, rejected } = macWith([newKey()], true);
    assert.deepEqual(mac.open('idempotency:aa', RECORD), { content: RECORD });
    const foreign = macWith([newKey()]).mac.seal('idempotency:aa', RECORD);
    assert.deepEqual(mac.open('idempotency:aa', foreign), { rejected: 'mismatch' });
    assert.deepEqual(
      rejected.map((r) => r.reason),
      ['mismatch'],
    );
  });

  it('without a key nothing is signed nor checked: records pass as they are', () => {
    assert.equal(NO_RECORD_MAC.seal('idempotency:aa', RECORD), RECORD);
    assert.deepEqual(NO_RECORD_MAC.open('idempotency:aa', RECORD), { content: RECORD });
    assert.equal(NO_RECORD_MAC.tag('postback:entry:pb_1', ['x']), undefined);
    const signed = macWith().mac.seal('idempotency:aa', RECORD);
    assert.deepEqual(NO_RECORD_MAC.open('idempotency:aa', signed), { content: RECORD });
  });
});
