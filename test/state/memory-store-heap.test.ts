// The memory store's byte budget is only as good as its estimate of what an entry costs the heap (approximateBytes):
// an estimate below the real cost lets the store grow past its budget towards the heap limit. A child
// process (for --expose-gc) fills stores with the entries the sidecar writes and compares the heap V8 reports.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { describe, it } from 'node:test';

const SRC = new URL('../../src/', import.meta.url).href;
const ENTRIES = 20_000;

/** Prints one `shape real-bytes estimated-bytes` line per shape, for ENTRIES entries of it. */
const FILL = `
import { createHash, randomBytes } from 'node:crypto';
const { MemoryStateStore, approximateBytes } = await import('${SRC}state/memory-store.ts');
const { encodeRecord } = await import('${SRC}idempotency/record.ts');
const sha = (text) => createHash('sha256').update(text).digest('hex');
const answer = (bytes, i) => encodeRecord({
  state: 'done',
  fingerprint: sha('f' + i),
  answer: { status: 201, headers: { 'content-type': 'application/json', date: new Date().toUTCString() }, body: randomBytes(bytes), code: 'ok' },
});
const shapes = {
  answer500: (i) => ['idempotency:' + sha(String(i)), answer(500, i)],
  answer5k: (i) => ['idempotency:' + sha(String(i)), answer(5_000, i)],
  claim: (i) => ['idempotency:' + sha(String(i)), encodeRecord({ state: 'in_progress', fingerprint: sha('f' + i), owner: randomBytes(12).toString('hex'), deadline: Date.now(), claim: randomBytes(9).toString('base64url') })],
  nonce: (i) => ['postback:nonce:' + randomBytes(16).toString('hex'), sha(String(i))],
  delivered: (i) => ['postback:delivered:' + sha(String(i)), new Date().toISOString()],
  twoByte: (i) => ['idempotency:' + sha(String(i)), JSON.stringify({ v: 1, text: 'zł€'.repeat(150) + i })],
};
for (const [name, make] of Object.entries(shapes)) {
  const store = new MemoryStateStore({ maxBytes: 4e9, maxEntries: 1e8 });
  gc(); gc();
  const before = process.memoryUsage().heapUsed;
  for (let i = 0; i < ${ENTRIES}; i++) {
    const [key, value] = make(i);
    await store.setIfAbsent(key, value, 3_600_000);
  }
  gc(); gc();
  console.log(name, process.memoryUsage().heapUsed - before, store.usage().bytes);
  await store.close();
}
`;

describe('memory store: the byte estimate against the heap V8 reports', () => {
  it('never counts less than an entry really costs, nor a third more, for every kind of entry the sidecar writes', () => {
    const child = spawnSync(process.execPath, ['--expose-gc', '--import', 'tsx', '--input-type=module', '-e', FILL], {
      encoding: 'utf8',
      timeout: 60_000,
    });
    assert.equal(child.status, 0, child.stderr);
    const lines = child.stdout.trim().split('\n');
    assert.equal(lines.length, 6, child.stdout);
    for (const line of lines) {
      const [shape, real, estimated] = line.split(' ');
      const ratio = Number(real) / Number(estimated);
      // 1.02: the collector's own noise. The estimate was 0.86-0.99 of the real cost on Node 20.
      assert.ok(ratio <= 1.02, `${shape}: ${real} bytes on the heap, only ${estimated} counted`);
      assert.ok(ratio >= 0.75, `${shape}: ${real} bytes on the heap, ${estimated} counted: the budget wastes heap`);
    }
  });
});
