// The Redis store seals every value with its MAC (SIDECAR_STATE_MAC_KEY_FILE) and checks it on every read: one seam
// for every record (docs/security.md, "Records in Redis"). On a real Redis: what a caller reads is only what a sidecar
// wrote for that key; a forged value reads as absent and is replaced by the next write that needs the key, unless the
// caller says it blocks (idempotency); a lock or cooldown without an expiry counts as absent; comparisons hold across
// a key rotation; a forged settled mark lets no postback go.
import assert from 'node:assert/strict';
import { createSecretKey, randomBytes, type KeyObject } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import { after, before, describe, it } from 'node:test';
import { createLogger } from '../../src/observability/log.js';
import { RedisInbox } from '../../src/postback/inbox.js';
import type { RecordRejected } from '../../src/state/record-mac.js';
import { accountTag } from '../../src/state/redis-keys.js';
import { RedisStateStore } from '../../src/state/redis-store.js';
import { SIDECAR_ACL_RULES, startRedis, type TestRedis } from '../support/redis-server.js';
import { CapturedOutput } from '../support/sidecar.js';

let redis: TestRedis;
before(async () => {
  redis = await startRedis();
});
after(async () => {
  await redis.close();
});

const ACCOUNT = accountTag('https://gateway.test', 'sealed@example.test');

async function openStore(keys: readonly KeyObject[] | undefined, rejected: RecordRejected[] = []) {
  const store = new RedisStateStore({
    topology: { mode: 'standalone', url: redis.url },
    accountTag: ACCOUNT,
    commandTimeoutMs: 1_000,
    ...(keys === undefined
      ? {}
      : { recordMac: { keys, acceptUnsigned: false, onRejected: (r: RecordRejected) => rejected.push(r) } }),
  });
  assert.equal(await store.whenAvailable(5_000), true);
  return store;
}

const newKey = () => createSecretKey(randomBytes(32));
const name = (what: string) => `token:${what}-${randomBytes(4).toString('hex')}`;

describe('the Redis store seals every record, on a real Redis', () => {
  it('a value is stored sealed for its key; copied to another key, or forged, it reads as absent, reported once', async () => {
    const rejected: RecordRejected[] = [];
    const store = await openStore([newKey()], rejected);
    try {
      const [mine, other, forged] = [name('a'), name('b'), name('c')];
      assert.equal(await store.setIfAbsent(mine, 'value-1', 60_000), true);
      assert.equal(await store.get(mine), 'value-1');
      const [raw = ''] = await redis.cli('GET', store.storedKey(mine));
      assert.match(raw, /^mac1\.[A-Za-z0-9_-]{43}\.value-1$/);
      await redis.cli('SET', store.storedKey(other), raw);
      await redis.cli('SET', store.storedKey(forged), 'value-1');
      for (let read = 0; read < 2; read++) {
        assert.equal(await store.get(other), undefined);
        assert.deepEqual(await store.read(forged), { found: 'refused' });
      }
      assert.deepEqual(
        rejected.map((r) => [r.kind, r.reason, r.key]),
        [
          ['token', 'mismatch', other],
          ['token', 'unsigned', forged],
        ],
        'each forged value reported once, with its kind and key, never its content',
      );
    } finally {
      await store.close();
    }
  });

  it('a write expecting no record replaces a forged one; with refusedBlocks the forged one stands', async () => {
    const store = await openStore([newKey()]);
    try {
      const [claimed, compared, conditioned, blocked] = [name('a'), name('b'), name('c'), name('d')];
      for (const key of [claimed, compared, conditioned, blocked]) await redis.cli('SET', store.storedKey(key), 'x');
      assert.equal(await store.setIfAbsent(claimed, 'mine', 60_000), true);
      assert.equal(await store.compareAndSet(compared, undefined, 'mine', 60_000), true);
      const written = await store.writeIf(
        [{ key: conditioned, holds: undefined }],
        [{ key: conditioned, value: 'mine', ttlMs: 60_000 }],
      );
      assert.equal(written, true);
      for (const key of [claimed, compared, conditioned]) assert.equal(await store.get(key), 'mine');
      assert.equal(await store.setIfAbsent(blocked, 'mine', 60_000, { refusedBlocks: true }), false);
      assert.deepEqual(await redis.cli('GET', store.storedKey(blocked)), ['x']);
    } finally {
      await store.close();
    }
  });

  it('bounded: a lock without an expiry, or with more left than the write, is taken; one within it is not', async () => {
    const store = await openStore([newKey()]);
    try {
      const [forever, longer, within] = [name('lock'), name('lock'), name('lock')];
      // Genuine values, sealed for their keys: the bound holds whoever wrote them.
      await redis.cli('SET', store.storedKey(forever), store.mac.seal(forever, 'other'));
      await redis.cli('SET', store.storedKey(longer), store.mac.seal(longer, 'other'), 'PX', '3600000');
      await redis.cli('SET', store.storedKey(within), store.mac.seal(within, 'other'), 'PX', '20000');
      assert.equal(await store.setIfAbsent(forever, 'mine', 30_000, { bounded: true }), true);
      assert.equal(await store.setIfAbsent(longer, 'mine', 30_000, { bounded: true }), true);
      assert.equal(await store.setIfAbsent(within, 'mine', 30_000, { bounded: true }), false);
      const [left = '0'] = await redis.cli('PTTL', store.storedKey(forever));
      assert.ok(Number(left) > 0 && Number(left) <= 30_000);
    } finally {
      await store.close();
    }
  });

  it('a Redis user without +pttl (an ACL from before it was needed): bounded writes are SET NX, logged once', async () => {
    const limited = await startRedis({ user: true, acl: SIDECAR_ACL_RULES.filter((rule) => rule !== '+pttl') });
    const logs = new CapturedOutput();
    const password = (await readFile(limited.passwordFile ?? '', 'utf8')).trim();
    const store = new RedisStateStore({
      topology: { mode: 'standalone', url: limited.url },
      accountTag: ACCOUNT,
      username: limited.username,
      password: () => Promise.resolve(password),
      commandTimeoutMs: 1_000,
      log: createLogger('info', logs),
    });
    try {
      assert.equal(await store.whenAvailable(5_000), true);
      assert.equal(await store.setIfAbsent('token:lock', 'a', 30_000, { bounded: true }), true);
      assert.equal(await store.setIfAbsent('token:lock', 'b', 30_000, { bounded: true }), false);
      assert.equal(store.isAvailable(), true, 'the refusal does not take the store down');
      const missing = logs.lines().filter((l) => l.event === 'state_store.acl_missing');
      assert.deepEqual(
        missing.map((l) => l.command),
        ['pttl'],
      );
    } finally {
      await store.close();
      await limited.close();
    }
  });

  it('compare-and-set and compare-and-delete compare what was read, across a key rotation', async () => {
    const [oldKey, newer] = [newKey(), newKey()];
    const store = await openStore([oldKey]);
    try {
      const key = name('rotated');
      await store.setIfAbsent(key, 'before', 60_000);
      store.mac.replaceKeys([newer, oldKey]);
      assert.equal(await store.get(key), 'before', 'sealed with the old key, still read');
      assert.equal(await store.compareAndSet(key, 'before', 'after', 60_000), true);
      const onlyNew = await openStore([newer]);
      assert.equal(await onlyNew.get(key), 'after', 'written again with the new key');
      await onlyNew.close();
      assert.equal(await store.compareAndDelete(key, 'after'), true);
      assert.deepEqual(await redis.cli('EXISTS', store.storedKey(key)), ['0']);
    } finally {
      await store.close();
    }
  });

  it('a replica without the MAC reads the sealed values (the rollout), and they stay sealed for the others', async () => {
    const sealing = await openStore([newKey()]);
    const plain = await openStore(undefined);
    try {
      const key = name('mixed');
      await sealing.setIfAbsent(key, 'sealed', 60_000);
      assert.equal(await plain.get(key), 'sealed');
      assert.equal(await plain.compareAndSet(key, 'sealed', 'plain', 60_000), true);
      assert.equal(await sealing.get(key), undefined, 'written without a MAC: refused by the sealing replica');
    } finally {
      await Promise.all([sealing.close(), plain.close()]);
    }
  });

  it('a held postback appended again: a genuine settled mark stops it, a forged one does not', async () => {
    const store = await openStore([newKey()]);
    try {
      const inbox = new RedisInbox(store);
      await inbox.prepare();
      for (const [mark, appended] of [
        [(id: string) => store.mac.seal(`postback:settled:${id}`, 'delivered'), false],
        [() => 'delivered', true],
        [() => `mac1.${randomBytes(32).toString('base64url')}.dropped`, true],
      ] as const) {
        const id = `pb_${randomBytes(8).toString('hex')}`;
        await redis.cli('SET', store.storedKey(`postback:settled:${id}`), mark(id), 'PX', '60000');
        const postback = { id, payload: '{"status":"SUCCESS"}', headers: {}, orderKey: `postback:order:${id}` };
        await inbox.appendAgain(postback, Date.now());
        const [exists] = await redis.cli('EXISTS', store.storedKey(`postback:entry:${id}`));
        assert.equal(exists, appended ? '1' : '0');
      }
    } finally {
      await store.close();
    }
  });
});
